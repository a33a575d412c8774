/**
 * What a redirect after a POST tells the next page. Only these codes are accepted from the query
 * string, so a crafted link cannot put words of its own on the page.
 */
const NOTICES = {
  replayed: 'Replayed: the event is PENDING again and its handler will run with a fresh set of attempts.',
  replayed_later:
    'Replayed, but the queue did not take the job just now; the relay will enqueue it within a few seconds.',
  decided: 'Decision recorded.',
} as const

export function noticeOf(query: Record<string, string>): { kind: 'ok'; text: string } | undefined {
  const code = query.notice
  if (code === 'bulk_replayed') {
    const n = Number(query.n)
    if (!Number.isInteger(n) || n < 0) return undefined
    return {
      kind: 'ok',
      text:
        n === 0
          ? 'No FAILED event matches the filter: nothing was replayed.'
          : `Replayed ${n} FAILED event${n === 1 ? '' : 's'}: they are PENDING again and will run with fresh attempts.`,
    }
  }
  if (code !== undefined && Object.hasOwn(NOTICES, code)) {
    return { kind: 'ok', text: NOTICES[code as keyof typeof NOTICES] }
  }
  return undefined
}
