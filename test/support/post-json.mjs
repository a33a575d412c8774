/**
 * POSTs JSON with the key; a dropped connection or a 5xx is an unknown outcome (it may have landed).
 * JavaScript so that the crash tests' child processes, which run without TypeScript, share it.
 *
 * @param {string} url
 * @param {string} key
 * @param {unknown} body
 * @param {AbortSignal} signal
 * @returns {Promise<
 *   | { kind: 'success'; result: Record<string, unknown> }
 *   | { kind: 'rejection'; error: string }
 *   | { kind: 'unknown'; error: string }
 * >}
 */
export async function postJson(url, key, body, signal) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
    signal,
  })
  const text = await response.text()
  if (response.status >= 200 && response.status < 300) return { kind: 'success', result: JSON.parse(text) }
  if (response.status >= 400 && response.status < 500)
    return { kind: 'rejection', error: `${response.status} ${text}` }
  return { kind: 'unknown', error: `${response.status}` }
}
