// Run inside a project that installed the packed hookledger (test/build/packed-install.test.ts):
// the postgres-js driver hookledger itself loads, under load, while the test resets every connection
// of the proxy in DATABASE_URL. Unpatched, the driver throws from a setImmediate and this process
// dies; patched, statements in flight fail and the pool works again. Prints one JSON line.
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

// The driver as hookledger's own modules resolve it (its bundled, patched copy), or DRIVER's.
const fromHookledger = createRequire(fileURLToPath(import.meta.resolve('hookledger')))
// (`postgres` resolves to <root>/cjs/src/index.js for require; its package.json is not exported.)
const packageRoot = process.env.DRIVER ?? dirname(dirname(dirname(fromHookledger.resolve('postgres'))))
const { default: postgres } = await import(pathToFileURL(join(packageRoot, 'src', 'index.js')).href)

const sql = postgres(process.env.DATABASE_URL, { max: 4, connect_timeout: 3, onnotice: () => {} })
/** @param {number} ms */
const sleep = (ms) => new Promise((wake) => setTimeout(wake, ms))
let stopped = false
let succeeded = 0
const failures = new Set()
const client = async () => {
  while (!stopped) {
    try {
      await sql.begin(async (/** @type {import('postgres').TransactionSql} */ tx) => {
        await tx`select pg_backend_pid()`
        await tx`select pg_sleep(0.01)`
        await tx`select 1`
      })
      await sql`select 2`
      succeeded += 1
    } catch (error) {
      failures.add(String(/** @type {{ code?: unknown }} */ (error).code))
    }
  }
}
const clients = Array.from({ length: 16 }, client)
process.stdout.write('ready\n')
// The test resets the proxy 10 times, 250 ms apart, then waits for this line.
await sleep(Number(process.env.LOAD_MS ?? 4000))
const afterResets = succeeded
const deadline = Date.now() + 10_000
while (succeeded - afterResets <= 20 && Date.now() < deadline) await sleep(50)
stopped = true
const settled = await Promise.race([Promise.all(clients).then(() => true), sleep(10_000).then(() => false)])
await sql.end({ timeout: 1 })
process.stdout.write(
  `${JSON.stringify({ driver: packageRoot, recovered: succeeded - afterResets, failures: [...failures], settled })}\n`,
)
