import { createHash } from 'node:crypto'
import { BackfillError } from './errors.js'

export interface StuckGuard {
  /**
   * Called with each page's item ids and the cursor of the page after it (null on the last page),
   * before anything on the page is claimed or asked for: throws stuck_cursor when the provider hands
   * out a cursor this pass already followed, or a page it already read.
   */
  page(ids: readonly string[], next: string | null): void
}

/**
 * A list that answers `has_more` with a cursor it already gave, or the same page under a new cursor,
 * never ends: without this, every pass read maxPagesPerPass copies of one page, claimed each again
 * (a copy with another body is a row in inbound_conflicts), ended "partial" and resumed at the same
 * place, and nothing was ever raised. A list read newest first never repeats a cursor or a page
 * within one sweep, so the first repeat is the provider's fault, and it stops the pass.
 */
export function stuckGuard(provider: string, resume: string | null): StuckGuard {
  const followed = new Set<string>(resume === null ? [] : [resume])
  const pages = new Map<string, number>()
  let index = 0
  return {
    page(ids, next) {
      index++
      // An empty page has nothing to repeat; only its cursor is checked.
      if (ids.length > 0) {
        const fingerprint = createHash('sha256').update(ids.join('\n')).digest('hex')
        const earlier = pages.get(fingerprint)
        if (earlier !== undefined) {
          throw new BackfillError(
            'stuck_cursor',
            `${provider} answered page ${index} of this pass with the same ${ids.length} item(s) as page ${earlier} ` +
              `(first ${ids[0]}): its paging goes round in circles; the pass stopped before claiming the page again`,
          )
        }
        pages.set(fingerprint, index)
      }
      if (next === null) return
      if (followed.has(next)) {
        throw new BackfillError(
          'stuck_cursor',
          `${provider} answered page ${index} of this pass with a next-page cursor this pass already followed ` +
            `(${next.slice(0, 100)}): its paging goes round in circles; the pass stopped there`,
        )
      }
      followed.add(next)
    },
  }
}
