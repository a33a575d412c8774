import type { FC } from 'hono/jsx'
import { Layout } from './layout.js'

/** The login form: a name for the audit trail and the ADMIN_TOKEN as the credential. */
export const LoginPage: FC<{ next: string; name?: string | undefined; error?: string | undefined }> = (
  props,
) => (
  <Layout title="Log in" notice={props.error === undefined ? undefined : { kind: 'bad', text: props.error }}>
    <div class="login card">
      <h1>Log in</h1>
      <form method="post" action="/admin/login">
        <input type="hidden" name="next" value={props.next} />
        <label>
          Your name (recorded with every replay and decision)
          <input name="name" value={props.name ?? ''} required maxlength={100} autocomplete="username" />
        </label>
        <label>
          Admin token
          <input name="token" type="password" required autocomplete="current-password" />
        </label>
        <button type="submit">Log in</button>
      </form>
    </div>
  </Layout>
)
