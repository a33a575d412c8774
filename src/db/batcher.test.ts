import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { createBatcher } from './batcher.js'

/**
 * A batcher whose "statement" doubles each item and records the batches it was given. With `hold`,
 * its first statement runs until that promise settles: the items behind it find one running.
 */
function doubling(
  options: { failOn?: number; maxBatch?: number; gatherMs?: number; hold?: Promise<void> } = {},
) {
  const batches: number[][] = []
  const batcher = createBatcher<number, number>(
    async (items) => {
      batches.push([...items])
      if (batches.length === 1) await options.hold
      if (items.includes(options.failOn ?? Number.NaN)) throw new Error(`cannot store ${options.failOn}`)
      return items.map((item) => item * 2)
    },
    // A window far longer than the turns below take, so a busy machine cannot split the batch.
    {
      gatherMs: options.gatherMs ?? 200,
      ...(options.maxBatch === undefined ? {} : { maxBatch: options.maxBatch }),
    },
  )
  return { batcher, batches }
}

/** A promise to hold a statement with, and its release. */
function gate() {
  let release = () => {}
  const held = new Promise<void>((resolve) => {
    release = resolve
  })
  return { held, release }
}

describe('createBatcher', () => {
  it("sends an item that finds the batcher idle at the end of its turn, with that turn's items", async () => {
    const { batcher, batches } = doubling()
    const both = Promise.all([batcher.run(1), batcher.run(2)])
    // Long before the 200 ms window: no statement had run, so there was nothing to gather behind.
    const first = await Promise.race([both, sleep(100).then(() => 'waited for the window')])
    expect(first).toEqual([2, 4])
    expect(batches).toEqual([[1, 2]])
  })

  it('gathers the items behind a running statement from different event-loop turns into one', async () => {
    const { held, release } = gate()
    const { batcher, batches } = doubling({ hold: held })
    const running = batcher.run(0)
    await nextTurn()
    const first = batcher.run(1)
    await nextTurn()
    const second = batcher.run(2)
    await nextTurn()
    const third = batcher.run(3)
    release()
    expect(await Promise.all([running, first, second, third])).toEqual([0, 2, 4, 6])
    // Cut at the end of a turn, these would have been three statements.
    expect(batches).toEqual([[0], [1, 2, 3]])
  })

  it('counts a statement that ended within the window as busy: the items after it gather', async () => {
    const { batcher, batches } = doubling()
    expect(await batcher.run(1)).toBe(2)
    await nextTurn()
    // Nothing runs now, but under load the callers' next items follow a statement this closely.
    const second = batcher.run(2)
    await nextTurn()
    const third = batcher.run(3)
    expect(await Promise.all([second, third])).toEqual([4, 6])
    expect(batches).toEqual([[1], [2, 3]])
  })

  it('starts a new statement once the batch is full', async () => {
    const { batcher, batches } = doubling({ maxBatch: 2 })
    expect(await Promise.all([1, 2, 3].map((item) => batcher.run(item)))).toEqual([2, 4, 6])
    expect(batches).toEqual([[1, 2], [3]])
  })

  it('gives the batch after a full one a whole window, not the rest of the full one', async () => {
    const { held, release } = gate()
    const { batcher, batches } = doubling({ maxBatch: 2, gatherMs: 400, hold: held })
    const full = Promise.all([batcher.run(1), batcher.run(2)])
    await sleep(200)
    // The full batch is still running: the third item gathers for a window.
    const third = batcher.run(3)
    // Past the full batch's window (400 ms after item 1), inside the third item's (600 ms).
    await sleep(300)
    const fourth = batcher.run(4)
    release()
    expect(await Promise.all([full, third, fourth])).toEqual([[2, 4], 6, 8])
    expect(batches).toEqual([
      [1, 2],
      [3, 4],
    ])
  })

  it('runs a failed batch again item by item, so only the bad item gets the error', async () => {
    const { batcher, batches } = doubling({ failOn: 2 })
    const results = await Promise.allSettled([1, 2, 3].map((item) => batcher.run(item)))
    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect(results[1]).toMatchObject({ reason: { message: 'cannot store 2' } })
    expect(batches).toEqual([[1, 2, 3], [1], [2], [3]])
  })
})
