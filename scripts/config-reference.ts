// `npm run docs:config`: writes docs/configuration.md from the config file's zod schema, so every
// option, its type, default and unit is written down where the schema says it, and nowhere else.
// The descriptions are the JSDoc on each field of the schema's source; test/build/config-reference
// .test.ts fails when the checked-in file is not what this prints.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, relative, resolve } from 'node:path'
import ts from 'typescript'
import { z } from 'zod'
import { configFileSchema } from '../src/config/file.js'
import { routesSchema } from '../src/config/routes.js'

const ROOT = resolve(import.meta.dirname, '..')
export const REFERENCE_PATH = join(ROOT, 'docs', 'configuration.md')

interface JsonSchema {
  type?: string | string[]
  properties?: Record<string, JsonSchema>
  required?: string[]
  items?: JsonSchema
  additionalProperties?: JsonSchema | boolean
  oneOf?: JsonSchema[]
  anyOf?: JsonSchema[]
  enum?: unknown[]
  const?: unknown
  default?: unknown
  minimum?: number
  maximum?: number
  minItems?: number
  pattern?: string
  format?: string
}

/** Per object literal of a `z.object({…})` in src/: its sorted keys, and the JSDoc of each key. */
type Docs = Map<string, Map<string, string>>

function sourceFiles(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name)
    if (entry.isDirectory()) return sourceFiles(path)
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts') ? [path] : []
  })
}

function collectDocs(): Docs {
  const docs: Docs = new Map()
  for (const file of sourceFiles(join(ROOT, 'src'))) {
    const text = readFileSync(file, 'utf8')
    if (!text.includes('object(')) continue
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true)
    const visit = (node: ts.Node) => {
      // A shape kept in a constant to be spread into several objects (routes' destination limits).
      if (
        ts.isVariableDeclaration(node) &&
        node.initializer !== undefined &&
        ts.isObjectLiteralExpression(node.initializer)
      ) {
        addShape(docs, node.initializer, source)
      }
      if (
        ts.isCallExpression(node) &&
        ts.isPropertyAccessExpression(node.expression) &&
        ['object', 'strictObject'].includes(node.expression.name.text)
      ) {
        const [shape] = node.arguments
        if (shape !== undefined && ts.isObjectLiteralExpression(shape)) addShape(docs, shape, source)
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
  }
  return docs
}

function addShape(docs: Docs, shape: ts.ObjectLiteralExpression, source: ts.SourceFile): void {
  const fields = new Map<string, string>()
  for (const property of shape.properties) {
    if (!ts.isPropertyAssignment(property) && !ts.isShorthandPropertyAssignment(property)) continue
    const name = property.name.getText(source).replace(/^['"]|['"]$/g, '')
    const comment = ts
      .getJSDocCommentsAndTags(property)
      .filter(ts.isJSDoc)
      .map((doc) => ts.getTextOfJSDocComment(doc.comment) ?? '')
      .join(' ')
    fields.set(name, comment.replace(/\s+/g, ' ').trim())
  }
  // A literal that spreads another shape is one part of a composed object, also with one key of its own.
  const composed = shape.properties.some(ts.isSpreadAssignment) ? `,${SPREAD}` : ''
  if (fields.size === 0) return
  // Docs are found by an object's keys, so two literals with the same keys must say the same of
  // each: otherwise one would silently describe the other's options.
  const signature = `${[...fields.keys()].sort().join(',')}${composed}`
  for (const [name, text] of docs.get(signature) ?? []) {
    if (fields.get(name) !== text) {
      throw new Error(
        `${source.fileName}: an object with the keys ${signature} is documented elsewhere with another ` +
          `comment for '${name}'; the reference cannot tell them apart (give them the same comment or another key)`,
      )
    }
  }
  docs.set(signature, fields)
}

const SPREAD = '...'

const UNITS: [RegExp, string][] = [
  [/Ms$/, 'ms'],
  [/Seconds$/, 's'],
  [/Bytes$/, 'bytes'],
  [/Days$/, 'days'],
]

function unitOf(name: string): string | undefined {
  return UNITS.find(([pattern]) => pattern.test(name))?.[1]
}

/** A default with its unit, and the unit's larger measure where that reads better (30000 ms = 30 s). */
function formatDefault(value: unknown, unit: string | undefined): string {
  if (value === undefined) return ''
  if (typeof value !== 'number' || unit === undefined) return `\`${JSON.stringify(value)}\``
  if (unit === 'ms' && value >= 1000) return `\`${value}\` (${humanMs(value)})`
  if (unit === 'bytes' && value >= 1024) return `\`${value}\` (${humanBytes(value)})`
  return `\`${value}\``
}

function humanMs(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`
  if (ms % 60_000 === 0) return `${ms / 60_000} min`
  return `${ms / 1000} s`
}

function humanBytes(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / 1024 / 1024} MiB` : `${bytes / 1024} KiB`
}

function typeOf(node: JsonSchema): string {
  if (node.const !== undefined) return `\`${JSON.stringify(node.const)}\``
  if (node.enum !== undefined) return node.enum.map((value) => `\`${JSON.stringify(value)}\``).join(' | ')
  const variants = node.oneOf ?? node.anyOf
  if (variants !== undefined) return [...new Set(variants.map(typeOf))].join(' | ')
  if (node.type === 'array') return node.items === undefined ? 'array' : `array of ${typeOf(node.items)}`
  if (
    node.type === 'object' &&
    node.properties === undefined &&
    typeof node.additionalProperties === 'object'
  ) {
    return `map of ${typeOf(node.additionalProperties)}`
  }
  if (Array.isArray(node.type)) return node.type.join(' | ')
  return node.format ?? node.type ?? 'any'
}

function rangeOf(schema: JsonSchema): string {
  // z.number().int() without bounds of its own says ±MAX_SAFE_INTEGER: no bound a reader needs.
  const bounded = (value: number | undefined) =>
    value !== undefined && Math.abs(value) < Number.MAX_SAFE_INTEGER ? value : undefined
  const node = { ...schema, minimum: bounded(schema.minimum), maximum: bounded(schema.maximum) }
  const parts: string[] = []
  if (node.minimum !== undefined && node.maximum !== undefined) parts.push(`${node.minimum}–${node.maximum}`)
  else if (node.minimum !== undefined) parts.push(`≥ ${node.minimum}`)
  else if (node.maximum !== undefined) parts.push(`≤ ${node.maximum}`)
  if (node.minItems !== undefined && node.minItems > 0) parts.push(`at least ${node.minItems}`)
  return parts.join(', ')
}

const cell = (text: string) => text.replaceAll('|', '\\|').replaceAll('\n', ' ')

interface Row {
  path: string
  type: string
  required: boolean
  defaultText: string
  unit: string
  range: string
  description: string
}

function walk(node: JsonSchema, path: string, docs: Docs, rows: Row[], inherited?: string): void {
  const variants = node.oneOf ?? node.anyOf
  if (variants !== undefined) {
    for (const variant of variants) {
      // A union of objects told apart by one constant field (verify's scheme): each its own block.
      const discriminator = Object.entries(variant.properties ?? {}).find(
        ([, child]) => child.const !== undefined,
      )
      const label =
        discriminator === undefined ? path : `${path}{${discriminator[0]}=${String(discriminator[1].const)}}`
      walk(variant, label, docs, rows, inherited)
    }
    return
  }
  if (node.type === 'array' && node.items !== undefined) {
    walk(node.items, `${path}[]`, docs, rows, inherited)
    return
  }
  if (
    node.type === 'object' &&
    node.properties === undefined &&
    typeof node.additionalProperties === 'object'
  ) {
    walk(node.additionalProperties, `${path}.NAME`, docs, rows, inherited)
    return
  }
  if (node.properties === undefined) return
  const keys = Object.keys(node.properties)
  const fields = docs.get([...keys].sort().join(',')) ?? composedDocs(docs, keys)
  for (const [name, child] of Object.entries(node.properties)) {
    // A section named for its unit (`statementTimeoutMs: { request, worker, … }`) gives it to its fields.
    const unit = unitOf(name) ?? inherited
    const childPath = path === '' ? name : `${path}.${name}`
    const isObject = child.type === 'object' && child.properties !== undefined
    rows.push({
      path: childPath,
      type: isObject ? 'object' : typeOf(child),
      required: node.required?.includes(name) ?? false,
      // An object section's default is `{}`: its fields' defaults say what that means.
      defaultText: isObject ? '' : formatDefault(child.default, unit),
      unit: unit ?? '',
      range: rangeOf(child),
      description: fields.get(name) ?? '',
    })
    walk(child, childPath, docs, rows, unit)
  }
}

/** An object made of parts (`.extend`, a shape spread): the docs of every literal all of whose keys it has. */
function composedDocs(docs: Docs, keys: readonly string[]): Map<string, string> {
  const merged = new Map<string, string>()
  for (const [signature, fields] of docs) {
    const parts = signature.split(',')
    const literalKeys = parts.filter((key) => key !== SPREAD)
    const spreads = literalKeys.length < parts.length
    if ((literalKeys.length < 2 && !spreads) || !literalKeys.every((key) => keys.includes(key))) continue
    for (const [name, text] of fields) if (text !== '' && !merged.has(name)) merged.set(name, text)
  }
  return merged
}

/** Sums the waits of a bounded doubling backoff between `attempts` attempts. */
function backoffTotalMs(attempts: number, baseMs: number, maxMs: number): number {
  let total = 0
  for (let made = 1; made < attempts; made += 1) total += Math.min(baseMs * 2 ** (made - 1), maxMs)
  return total
}

/** The reference as markdown: what the defaults add up to, then one row per option. */
export function renderConfigReference(): string {
  const schema = z.toJSONSchema(configFileSchema, { io: 'input', unrepresentable: 'any' }) as JsonSchema
  const rows: Row[] = []
  walk(schema, '', collectDocs(), rows)
  const defaults = configFileSchema.parse({ sources: [] })
  const [route] = routesSchema.parse([{ id: 'r', forward: { url: 'https://example.com/' } }])
  const breaker = route?.forward?.circuitBreaker
  const worker = defaults.worker
  const deadMs = backoffTotalMs(worker.maxAttempts, worker.backoffBaseMs, worker.backoffMaxMs)
  const table = rows.map(
    (row) =>
      `| \`${cell(row.path)}\`${row.required ? ' (required)' : ''} | ${cell(row.type)} | ${row.defaultText} | ${row.unit} | ${cell(row.range)} | ${cell(row.description)} |`,
  )
  return `# Configuration reference

<!-- Generated by \`npm run docs:config\` from the zod schema of the config file
(${relative(ROOT, join(ROOT, 'src/config/file.ts'))} and the schemas it composes) and the JSDoc on
each field. Do not edit: change the schema and run the script; test/build/config-reference.test.ts
fails when this file is stale. -->

The config file (\`HOOKLEDGER_CONFIG\`, default \`./hookledger.config.json\`) is JSON, validated at
start. Every option below but \`sources\` may be left out; the environment variables are in the
README's [Environment](../README.md#environment) table.

## What the defaults add up to

- **An unknown outcome waits ${humanMs(defaults.outbound.reconcileDelayMs)} before it is looked at.** A
  tool call whose result was lost (a timeout, a reset) is checked with the tool's \`reconcile\` after
  \`outbound.reconcileDelayMs\`; without a reconcile, or when it cannot tell, the operation goes to a
  person as an approval then.
- **A dead destination fails its event after about ${humanMs(deadMs)}** of waits: \`worker.maxAttempts\`
  (${worker.maxAttempts}) attempts, the waits doubling from \`worker.backoffBaseMs\`
  (${humanMs(worker.backoffBaseMs)}) up to \`worker.backoffMaxMs\`, plus each attempt's own time (up to
  the forward's \`timeoutMs\` when nothing answers). Then the event is FAILED and can be replayed.
- **Every route's forward has a circuit breaker, always on**: ${breaker?.failureThreshold ?? '?'}
  consecutive failures open it, and it holds deliveries back for
  ${humanMs(breaker?.coolDownMs ?? 0)} before one probe goes through
  (\`sources[].routes[].forward.circuitBreaker\`), and so has a source's \`handler\` forward, its one
  route (\`sources[].handler{type=forward}.circuitBreaker\`).
- **A destination that answers 410 Gone disables its route** until a person re-enables it; its
  deliveries are paused, never FAILED, and look again every
  ${humanMs(defaults.delivery.pausedRecheckMs)} (\`delivery.pausedRecheckMs\`). Re-enabling the route resumes them at once.

## Every option

Paths use \`[]\` for an element of a list, \`NAME\` for a key of a map, and \`{scheme=…}\` for the
fields of one variant. Units come from the name: \`…Ms\` milliseconds, \`…Seconds\` seconds,
\`…Bytes\` bytes, \`…Days\` days.

| option | type | default | unit | range | meaning |
|---|---|---|---|---|---|
${table.join('\n')}
`
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  writeFileSync(REFERENCE_PATH, renderConfigReference())
  process.stdout.write(`wrote ${relative(process.cwd(), REFERENCE_PATH)}\n`)
}
