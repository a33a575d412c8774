/**
 * Why a backfill pass stopped before its sweep was complete. Each names what to fix or what to wait
 * for; the cursor keeps the last page whose events were handled, so the next pass resumes there.
 */
export type BackfillErrorCode =
  /** 401: the key in the named variable is wrong, revoked or expired. */
  | 'unauthorized'
  /** 403 that is not a rate limit: the key lacks a permission (GitHub: admin:repo_hook / webhooks read-write). */
  | 'forbidden'
  /** 404: the repository or hook does not exist, or the key cannot see it. */
  | 'not_found'
  /** 429 (or GitHub's exhausted limit) asking for a longer wait than maxWaitSeconds, or still refusing after retries. */
  | 'rate_limited'
  /** 5xx, a timeout or a refused connection, still so after retries. */
  | 'provider_unavailable'
  /** Another 4xx: the provider refused the request itself (its message is quoted). */
  | 'request_rejected'
  /** A 2xx whose body is not the documented shape. */
  | 'invalid_response'
  /** An answer whose body outgrew maxResponseBytes: its reading was stopped there. */
  | 'response_too_large'
  /** The provider handed out a page cursor, or a page, this pass had already read: paging would never end. */
  | 'stuck_cursor'
  /** The pass made no progress for longer than its lease, and another pass took the source over. */
  | 'lease_lost'
  /** Another process runs a pass for this source now. */
  | 'pass_running'

export class BackfillError extends Error {
  constructor(
    readonly code: BackfillErrorCode,
    message: string,
  ) {
    super(message)
    this.name = 'BackfillError'
  }
}
