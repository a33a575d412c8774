import { z } from 'zod'

/** The config fields every scheme shares, so their rules (and messages) cannot drift apart. */

/** One or more secrets, each a literal or `env:NAME`; several at once are accepted for rotation. */
export const secretsField = z.array(z.string().min(1)).min(1, 'needs at least one secret')

/** How far a signed timestamp may be from the server's clock, both ways. */
export const toleranceField = z
  .number()
  .int()
  .min(1)
  .max(7 * 24 * 3600)
  .default(300)
