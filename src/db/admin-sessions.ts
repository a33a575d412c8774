import { and, eq, gt, isNull, lt, sql } from 'drizzle-orm'
import type { Database } from './client.js'
import { adminSessions } from './schema.js'

/**
 * Records a login's session, and deletes the rows of sessions over for a day or more: of no use to
 * anyone, and logins are rare enough to sweep here.
 */
export async function startAdminSession(
  db: Database,
  session: { id: string; name: string; expiresAt: Date },
): Promise<void> {
  await db.delete(adminSessions).where(lt(adminSessions.expiresAt, sql`now() - interval '1 day'`))
  await db.insert(adminSessions).values(session)
}

/** Whether the session is recorded, not revoked and not expired. */
export async function isAdminSessionLive(db: Database, id: string): Promise<boolean> {
  const [row] = await db
    .select({ id: adminSessions.id })
    .from(adminSessions)
    .where(
      and(eq(adminSessions.id, id), isNull(adminSessions.revokedAt), gt(adminSessions.expiresAt, new Date())),
    )
  return row !== undefined
}

/** Revokes one session: every copy of its cookie reads as logged out from now on. */
export async function revokeAdminSession(db: Database, id: string): Promise<void> {
  await db
    .update(adminSessions)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(adminSessions.id, id), isNull(adminSessions.revokedAt)))
}

/** Revokes every session not yet revoked. */
export async function revokeAllAdminSessions(db: Database): Promise<void> {
  await db.update(adminSessions).set({ revokedAt: sql`now()` }).where(isNull(adminSessions.revokedAt))
}
