/**
 * Thrown when a lease this caller held was taken over by another (its own ran out): the new holder
 * owns the row now, so the caller stops without writing anything more. Inbound events and outbound
 * operations are leased alike.
 */
export class LeaseLostError extends Error {
  constructor(what: string) {
    super(`the lease on ${what} was taken over`)
    this.name = 'LeaseLostError'
  }
}
