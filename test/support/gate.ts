import type postgres from 'postgres'

/** A promise the test resolves when it chooses: what a held handler, request, lock or step waits for. */
export function gate(): { opened: Promise<void>; open: () => void } {
  let open: () => void = () => {}
  const opened = new Promise<void>((resolve) => {
    open = resolve
  })
  return { opened, open: () => open() }
}

/**
 * Runs `take` (a lock, a row lock, a write) in a transaction kept open until the returned release is
 * called; resolves once `take` has run, so whatever it holds is held.
 */
export async function holdInTransaction(
  sql: postgres.Sql,
  take: (tx: postgres.TransactionSql) => Promise<unknown>,
): Promise<() => Promise<void>> {
  const { opened: released, open: release } = gate()
  let holder: Promise<unknown> | undefined
  await new Promise<void>((taken) => {
    holder = sql.begin(async (tx) => {
      await take(tx)
      taken()
      await released
    })
  })
  return async () => {
    release()
    await holder
  }
}
