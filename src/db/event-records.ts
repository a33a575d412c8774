// What a worker's attempt at an event leaves in the ledger: written by the worker's statements
// (events.ts) and, for a direct handler's DONE, by the settle it shares with the outbound ledger's
// successes (operation-batches.ts).

export interface AttemptRecord {
  attempt: number
  startedAt: Date
  responseStatus?: number | undefined
  responseExcerpt?: string | undefined
}

/** A leased event's DONE mark: its row, the lease it holds, and the attempt that finished it. */
export interface DoneRecord extends AttemptRecord {
  id: string
  token: string
  finishedAt: Date
}
