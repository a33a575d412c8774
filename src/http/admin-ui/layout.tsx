import { raw } from 'hono/html'
import type { FC, PropsWithChildren } from 'hono/jsx'
import { CSRF_FIELD } from './session.js'
import { CSS } from './styles.js'

/** The admin page's sections, in the nav's order. */
const SECTIONS = [
  { section: 'overview', href: '/admin', label: 'Overview' },
  { section: 'events', href: '/admin/events', label: 'Events' },
  { section: 'operations', href: '/admin/operations', label: 'Operations' },
  { section: 'approvals', href: '/admin/approvals', label: 'Approvals' },
  { section: 'routes', href: '/admin/routes', label: 'Routes' },
  { section: 'queues', href: '/admin/queues', label: 'Queues' },
] as const

export type Section = (typeof SECTIONS)[number]['section']

export interface PageProps {
  title: string
  /** Absent on the login and error pages of a visitor who is not logged in. */
  user?: { name: string; csrf: string } | undefined
  section?: Section | undefined
  notice?: { kind: 'ok' | 'bad'; text: string } | undefined
  /** Reload the page every this many seconds (a meta refresh: the page runs no script). */
  refreshSeconds?: number | undefined
}

// Without the doctype browsers render in quirks mode, where tables do not inherit the font size.
export const Layout: FC<PropsWithChildren<PageProps>> = (props) => (
  <>
    {raw('<!DOCTYPE html>')}
    <Page {...props} />
  </>
)

const Page: FC<PropsWithChildren<PageProps>> = (props) => (
  <html lang="en">
    <head>
      <meta charset="utf-8" />
      <meta name="viewport" content="width=device-width, initial-scale=1" />
      {props.refreshSeconds === undefined ? null : (
        <meta http-equiv="refresh" content={String(props.refreshSeconds)} />
      )}
      <title>{`${props.title} · hookledger admin`}</title>
      <style dangerouslySetInnerHTML={{ __html: CSS }} />
    </head>
    <body>
      <header class="top">
        <span class="brand">hookledger</span>
        {props.user === undefined ? null : (
          <>
            <nav>
              {SECTIONS.map(({ section, href, label }) => (
                <NavLink href={href} on={props.section === section}>
                  {label}
                </NavLink>
              ))}
            </nav>
            <div class="who">
              <span>{props.user.name}</span>
              <LogoutForm csrf={props.user.csrf} />
              <LogoutForm csrf={props.user.csrf} everywhere />
            </div>
          </>
        )}
      </header>
      <main>
        {props.notice === undefined ? null : (
          <div class={`notice ${props.notice.kind}`} role="status">
            {props.notice.text}
          </div>
        )}
        {props.children}
      </main>
    </body>
  </html>
)

/** A link among others to the same kind of view (a section, a window), marked when it is the current one. */
export const NavLink: FC<PropsWithChildren<{ href: string; on: boolean }>> = (props) => (
  <a href={props.href} class={props.on ? 'on' : undefined}>
    {props.children}
  </a>
)

const LogoutForm: FC<{ csrf: string; everywhere?: boolean }> = ({ csrf, everywhere }) => (
  <form method="post" action="/admin/logout">
    <CsrfField token={csrf} />
    {everywhere === true ? (
      <>
        <input type="hidden" name="everywhere" value="yes" />
        <button class="link" type="submit" title="Ends every admin session, on every browser">
          everywhere
        </button>
      </>
    ) : (
      <button class="link" type="submit">
        Log out
      </button>
    )}
  </form>
)

export const CsrfField: FC<{ token: string }> = (props) => (
  <input type="hidden" name={CSRF_FIELD} value={props.token} />
)

const BADGES: Record<string, string> = {
  done: 'b-ok',
  completed: 'b-ok',
  compensated: 'b-ok',
  failed: 'b-bad',
  abandoned: 'b-bad',
  error: 'b-bad',
  pending: 'b-info',
  processing: 'b-info',
  in_progress: 'b-info',
  retry_approved: 'b-info',
  needs_reconciliation: 'b-warn',
  awaiting_approval: 'b-warn',
  exhausted: 'b-warn',
  // Routes and their destinations' circuits.
  waiting: 'b-warn',
  paused: 'b-warn',
  disabled: 'b-bad',
  closed: 'b-ok',
  half_open: 'b-warn',
  open: 'b-bad',
}

export const Badge: FC<{ status: string }> = (props) => (
  <span class={`badge ${BADGES[props.status] ?? 'b-muted'}`}>{props.status}</span>
)

/** Times in UTC, to the second: the ledger, the logs and the providers' dashboards all agree on UTC. */
export function utc(date: Date | null | undefined): string {
  if (date === null || date === undefined) return '—'
  return `${date.toISOString().slice(0, 19).replace('T', ' ')}Z`
}

/** JSON as it is; `wrap` breaks long lines (an evidence note is prose a person must read whole). */
export const Json: FC<{ value: unknown; wrap?: boolean }> = (props) => (
  <pre class={props.wrap === true ? 'wrap' : undefined}>{prettyJson(props.value)}</pre>
)

export function prettyJson(value: unknown): string {
  if (value === undefined || value === null) return 'null'
  return JSON.stringify(value, null, 2)
}

/** A page with one message, for errors a person can act on (a bad filter, a stale decision). */
export const MessagePage: FC<{ props: PageProps; back?: { href: string; label: string } | undefined }> = ({
  props,
  back,
}) => (
  <Layout {...props}>
    <h1>{props.title}</h1>
    {back === undefined ? null : (
      <p>
        <a href={back.href}>{back.label}</a>
      </p>
    )}
  </Layout>
)
