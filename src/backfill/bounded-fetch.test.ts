import { describe, expect, it } from 'vitest'
import { readCapped } from './bounded-fetch.js'

/** A body that hands over one chunk and then neither ends nor fails, whatever is asked of it. */
function stuckBody(): Response {
  let pulls = 0
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      pulls += 1
      if (pulls === 1) {
        controller.enqueue(new TextEncoder().encode('{"object":"list",'))
        return
      }
      return new Promise<void>(() => {})
    },
    cancel: () => new Promise<void>(() => {}),
  })
  return new Response(stream)
}

describe('readCapped', () => {
  it('ends at the deadline even when the body stream never settles the read it owes', async () => {
    // What Node's fetch can do after an abort once the body has started (nodejs/node#56917).
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 50)
    const started = Date.now()
    await expect(readCapped(stuckBody(), 1024, controller.signal)).rejects.toMatchObject({
      name: 'AbortError',
    })
    expect(Date.now() - started).toBeLessThan(1000)
  })

  it('reads a body to its end, and stops one over the cap', async () => {
    const signal = new AbortController().signal
    expect(await readCapped(new Response('{"data":[]}'), 1024, signal)).toBe('{"data":[]}')
    expect(await readCapped(new Response('x'.repeat(2048)), 1024, signal)).toEqual({
      kind: 'too_large',
      bytes: 2048,
    })
  })
})
