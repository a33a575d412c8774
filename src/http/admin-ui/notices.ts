import type { Context } from 'hono'
import { deleteCookie, getCookie, setCookie } from 'hono/cookie'
import { isHttps } from './session.js'

/**
 * What a redirect after a POST tells the next page, as a one-shot cookie: the page that shows it
 * deletes it, so a reload (pages are no-store) shows the page as it is now, with no stale banner.
 * Only these codes are accepted, so a crafted cookie cannot put words of its own on the page.
 */
const NOTICES = {
  replayed: 'Replayed: the event is PENDING again and its handler will run with a fresh set of attempts.',
  replayed_later:
    'Replayed, but the queue did not take the job just now; the relay will enqueue it within a few seconds.',
  decided: 'Decision recorded.',
} as const

export type NoticeCode = keyof typeof NOTICES | 'bulk_replayed'
export type Notice = { kind: 'ok'; text: string }

const NOTICE_COOKIE = 'hl_notice'
const cookieOptions = (c: Context) =>
  ({ path: '/admin', httpOnly: true, sameSite: 'Strict', secure: isHttps(c) }) as const

/** Leaves a notice for the next page this browser loads (the redirect's target). */
export function flashNotice(c: Context, code: NoticeCode, count?: number): void {
  const value = count === undefined ? code : `${code}:${count}`
  // A minute is ample for a redirect to be followed; an unfollowed one must not surface much later.
  setCookie(c, NOTICE_COOKIE, value, { ...cookieOptions(c), maxAge: 60 })
}

/** The notice left for this page, if any; it is shown once. */
export function takeNotice(c: Context): Notice | undefined {
  const value = getCookie(c, NOTICE_COOKIE)
  if (value === undefined) return undefined
  deleteCookie(c, NOTICE_COOKIE, cookieOptions(c))
  return noticeOf(value)
}

function noticeOf(value: string): Notice | undefined {
  const [code, count] = value.split(':')
  if (code === 'bulk_replayed') {
    const n = Number(count)
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
