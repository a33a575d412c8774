/** One answer read whole: its status, its headers and its body as text. */
export interface WholeAnswer {
  status: number
  headers: Headers
  text: string
}

/** Why one attempt got no whole answer. `too_large` is the provider's doing and not worth a retry. */
export type AttemptFailure =
  | { kind: 'timeout' }
  | { kind: 'too_large'; bytes: number }
  | { kind: 'server_error'; status: number }
  | { kind: 'network'; message: string }

export interface BoundedFetchOptions {
  headers: Record<string, string>
  /** The deadline of the whole exchange: connection, headers and every byte of the body. */
  timeoutMs: number
  /** The most body bytes read; a longer body is abandoned there, before it is all in memory. */
  maxBytes: number
}

/**
 * One request whose answer is bounded in time and size. `fetch`'s own timeout signal ends only the
 * wait for the headers once the body is handed over, and `response.text()` takes whatever length a
 * provider sends: a body trickling a byte a second held a pass for minutes, and a 200 MB page grew
 * the process by 700 MB. Here one deadline covers the body too, and the body is read as a stream
 * that is cut (and its connection closed) at maxBytes. A 5xx is not read at all.
 */
export async function boundedFetch(
  method: string,
  url: string,
  options: BoundedFetchOptions,
): Promise<WholeAnswer | { failure: AttemptFailure }> {
  const controller = new AbortController()
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    controller.abort()
  }, options.timeoutMs)
  try {
    const response = await fetch(url, {
      method,
      headers: options.headers,
      signal: controller.signal,
      redirect: 'error',
    })
    if (response.status >= 500) return { failure: { kind: 'server_error', status: response.status } }
    const declared = Number(response.headers.get('content-length'))
    if (Number.isFinite(declared) && declared > options.maxBytes) {
      return { failure: { kind: 'too_large', bytes: declared } }
    }
    const body = await readCapped(response, options.maxBytes, controller.signal)
    if (typeof body !== 'string') return { failure: body }
    return { status: response.status, headers: response.headers, text: body }
  } catch (error) {
    if (timedOut) return { failure: { kind: 'timeout' } }
    return { failure: { kind: 'network', message: error instanceof Error ? error.message : String(error) } }
  } finally {
    clearTimeout(timer)
    // Whatever was not read (a 5xx, a body over the cap, a failure halfway) goes with its connection,
    // rather than being drained at the provider's pace. A body read to its end is unaffected.
    controller.abort()
  }
}

/**
 * The body, read until it ends, passes maxBytes, or `signal` aborts. The abort is raced against each
 * read rather than left to fetch: Node's fetch can leave a read it should fail pending for ever once
 * the body has started (nodejs/node#56917, nodejs/undici#4089), and a pass would then wait on it.
 */
export async function readCapped(
  response: Response,
  maxBytes: number,
  signal: AbortSignal,
): Promise<string | { kind: 'too_large'; bytes: number }> {
  if (response.body === null) return ''
  const chunks: Uint8Array[] = []
  let total = 0
  const reader = response.body.getReader()
  let stop = () => {}
  const aborted = new Promise<never>((_resolve, reject) => {
    stop = () => reject(signal.reason)
    if (signal.aborted) stop()
    else signal.addEventListener('abort', stop, { once: true })
  })
  try {
    for (;;) {
      const { done, value } = await Promise.race([reader.read(), aborted])
      if (done) break
      total += value.byteLength
      if (total > maxBytes) return { kind: 'too_large', bytes: total }
      chunks.push(value)
    }
  } finally {
    signal.removeEventListener('abort', stop)
    // Whatever is left unread (over the cap, or cut by the deadline) is not waited for.
    reader.cancel().catch(() => {})
  }
  return new TextDecoder().decode(Buffer.concat(chunks, total))
}
