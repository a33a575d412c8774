import type { Context, MiddlewareHandler } from 'hono'
import { ApiError } from '../errors.js'

/**
 * The most of a refused body read and thrown away before the 413, and for how long. A client such
 * as `fetch` (undici) writes its whole body before it reads the answer: a socket closed under it
 * fails with EPIPE or "other side closed" instead of the 413. Reading the rest first lets it read the
 * answer; beyond these bounds the answer goes at once, and such a client sees the socket close.
 */
const DRAIN_MAX_BYTES = 16 * 1024 * 1024
const DRAIN_MAX_MS = 5000

/**
 * Refuses a body larger than `maxSize` with 413 `payload_too_large`, before reading it (declared
 * length) or as soon as it grows past the limit (chunked). The rest of the body, up to
 * DRAIN_MAX_BYTES and DRAIN_MAX_MS, is read and thrown away first, so the client can read the answer.
 * The answer says `Connection: close`: a body beyond those bounds is still on the socket, so the
 * server closes it, and a client told keep-alive would send its next request into a socket about to
 * be reset.
 *
 * A declared length within the limit is checked from the header alone. Looking at `c.req.raw.body`
 * makes @hono/node-server build a full web `Request` with a stream over the socket for every
 * request; the body was then read through that stream instead of straight from Node's request. On
 * the webhook route that was ~9 % of the intake's CPU, and more in garbage collection
 * (`BENCH_CPU_PROF`). Only a body without a declared length, or one to refuse, goes through it.
 */
export function limitBody(maxSize: number, what: string): MiddlewareHandler {
  const message = `${what} accepts bodies of at most ${maxSize} bytes`
  return async (c, next) => {
    const declared = c.req.header('content-length')
    if (declared !== undefined && c.req.header('transfer-encoding') === undefined) {
      const length = Number.parseInt(declared, 10)
      if (!(length > maxSize)) return next()
      // A body that could not be drained anyway is not read at all.
      if (length <= DRAIN_MAX_BYTES) await drain(c)
      throw payloadTooLarge(message)
    }
    const stream = c.req.raw.body
    if (stream === null) return next()
    const body = await readWithin(stream.getReader(), maxSize)
    if (body === undefined) throw payloadTooLarge(message)
    c.req.raw = new Request(c.req.raw, { body })
    return next()
  }
}

export function payloadTooLarge(message: string): ApiError {
  return new ApiError(413, 'payload_too_large', message, { headers: { Connection: 'close' } })
}

/** A streamed body if it stays within `maxSize`; undefined (after draining the rest) when it does not. */
async function readWithin(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  maxSize: number,
): Promise<Uint8Array | undefined> {
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.length
    if (size > maxSize) {
      await drainReader(reader, size)
      return undefined
    }
    chunks.push(value)
  }
  const body = new Uint8Array(size)
  let offset = 0
  for (const chunk of chunks) {
    body.set(chunk, offset)
    offset += chunk.length
  }
  return body
}

async function drain(c: Context): Promise<void> {
  const stream = c.req.raw.body
  if (stream !== null) await drainReader(stream.getReader(), 0)
}

/**
 * Reads and discards until the body ends or a bound is reached. A read still pending at the time
 * bound is left to the socket's close (its settlement is caught): cancelling it would destroy the
 * request, and the socket with it, before the answer is written.
 */
async function drainReader(reader: ReadableStreamDefaultReader<Uint8Array>, alreadyRead: number) {
  const deadline = Date.now() + DRAIN_MAX_MS
  let total = alreadyRead
  let timer: NodeJS.Timeout | undefined
  const timeUp = new Promise<'time'>((resolve) => {
    timer = setTimeout(() => resolve('time'), DRAIN_MAX_MS)
  })
  try {
    while (total <= DRAIN_MAX_BYTES && Date.now() < deadline) {
      const read = reader.read()
      read.catch(() => {})
      const next = await Promise.race([read, timeUp])
      if (next === 'time' || next.done) return
      total += next.value.length
    }
  } catch {
    // The client went away while sending: nothing is left to read, and the answer goes nowhere.
  } finally {
    clearTimeout(timer)
  }
}
