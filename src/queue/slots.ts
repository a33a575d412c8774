/**
 * At most `size` holders at a time, the rest waiting in order. The worker's handlers run holding one,
 * so `worker.concurrency` bounds the handlers running at once however many rows each job carries.
 */
export interface Slots {
  /** Waits for a slot and holds it until the returned release is called (once is enough; more do nothing). */
  acquire(): Promise<() => void>
  /** A slot now, or undefined when none is free or others are waiting for one: never waits. */
  tryAcquire(): (() => void) | undefined
}

export function createSlots(size: number): Slots {
  let free = size
  const waiting: Array<() => void> = []
  const handOn = () => {
    const next = waiting.shift()
    if (next === undefined) free += 1
    else next()
  }
  const releaser = () => {
    let held = true
    return () => {
      if (!held) return
      held = false
      handOn()
    }
  }
  return {
    async acquire() {
      if (free > 0) free -= 1
      else await new Promise<void>((resolve) => waiting.push(resolve))
      return releaser()
    },
    tryAcquire() {
      if (free === 0) return undefined
      free -= 1
      return releaser()
    },
  }
}
