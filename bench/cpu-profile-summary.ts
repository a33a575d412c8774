// `npx tsx bench/cpu-profile-summary.ts <file.cpuprofile>... [--from=FUNCTION] [--skip-ms=N]
//   [--events=N] [--top=N] [--by=samples]`: where a process's CPU went, from V8 CPU profiles
// (`node --cpu-prof`, or BENCH_CPU_PROF=<folder> with `npm run bench`), summed over the files given.
// Self time grouped by module (an npm package, a file of this project, a part of Node), by owner
// (the innermost package or project file on the stack: Node's and V8's work charged to whoever asked
// for it, socket writes to the driver that wrote), inclusive time by module (any frame of it on the
// stack), and the functions with the most self time.
// --from=sendHttp leaves out each profile's samples before the first one with that function on the
// stack (the process's start-up, up to its first forward); --skip-ms the first N ms of each;
// --events (the events of all the files together) turns the busy time into µs per event;
// --by=samples weighs samples by count, not by the time between them: on a loaded machine the time
// between two samples includes the time the thread waited for a core, while a sample is taken only
// when it runs (the sampler's signals do not pile up), so each stands for about one interval of CPU.
import { readFileSync } from 'node:fs'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

const args = process.argv.slice(2)
const option = (name: string) => args.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3)
const files = args.filter((arg) => !arg.startsWith('--'))
if (files.length === 0) {
  process.stderr.write(
    'usage: tsx bench/cpu-profile-summary.ts <file.cpuprofile>... [--from=FUNCTION] [--skip-ms=N] [--events=N] [--top=N] [--by=samples]\n',
  )
  process.exit(2)
}
const skipUs = Number(option('skip-ms') ?? 0) * 1000
const from = option('from')
const events = option('events') === undefined ? undefined : Number(option('events'))
const top = Number(option('top') ?? 30)
const bySamples = option('by') === 'samples'
// Node's default sampling interval (--cpu-prof-interval).
const INTERVAL_US = 1000

/** The module a frame belongs to: an npm package, a file of this project, a part of Node, or V8's own. */
function moduleOf(frame: ProfileNode['callFrame']): string {
  const { url, functionName } = frame
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)'
  const packaged = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (packaged?.[1] !== undefined) return packaged[1]
  if (url.startsWith('node:')) {
    const parts = url.slice('node:'.length).split('/')
    return `node:${parts[0] === 'internal' ? parts.slice(0, 2).join('/') : parts[0]}`
  }
  const own = /\/((?:src|dist|bench|test)\/.*)$/.exec(url)
  return own?.[1] ?? url
}

const selfByModule = new Map<string, number>()
const selfByOwner = new Map<string, number>()
const inclusiveByModule = new Map<string, number>()
const selfByFunction = new Map<string, number>()
const add = (map: Map<string, number>, key: string, us: number) => map.set(key, (map.get(key) ?? 0) + us)
let busy = 0
let idle = 0

for (const file of files) {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const parentOf = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id)
  /** The frames on a sample's stack, innermost first. */
  const stackOf = (node: ProfileNode) => {
    const frames: ProfileNode[] = []
    for (let id: number | undefined = node.id; id !== undefined; id = parentOf.get(id)) {
      const frame = byId.get(id)
      if (frame !== undefined && frame.callFrame.functionName !== '(root)') frames.push(frame)
    }
    return frames
  }
  let elapsed = 0
  let started = from === undefined
  for (let i = 0; i < profile.samples.length; i += 1) {
    // By time, a sample stands for the delta to the next one (the last one's is unknown: left out).
    const us = bySamples ? INTERVAL_US : (profile.timeDeltas[i + 1] ?? 0)
    elapsed += profile.timeDeltas[i] ?? 0
    if (elapsed < skipUs) continue
    const node = byId.get(profile.samples[i] ?? -1)
    if (node === undefined) continue
    if (!started) {
      started = stackOf(node).some((frame) => frame.callFrame.functionName === from)
      if (!started) continue
    }
    const name = node.callFrame.functionName
    if (name === '(idle)') {
      idle += us
      continue
    }
    busy += us
    const module = moduleOf(node.callFrame)
    add(selfByModule, module, us)
    add(selfByFunction, `${name || '(anonymous)'}  [${module}:${node.callFrame.lineNumber + 1}]`, us)
    const modules = stackOf(node).map((frame) => moduleOf(frame.callFrame))
    for (const m of new Set(modules)) add(inclusiveByModule, m, us)
    // GC and the (program) bucket have no stack to charge.
    add(selfByOwner, modules.find((m) => !m.startsWith('node:') && !m.startsWith('(')) ?? module, us)
  }
}

const ms = (us: number) => (us / 1000).toFixed(0)
const percent = (us: number) => `${((100 * us) / Math.max(busy, 1)).toFixed(1)} %`
const perEvent = (us: number) => (events === undefined ? '' : `  ${(us / events).toFixed(1)} µs/event`)
const sorted = (map: Map<string, number>) => [...map.entries()].sort((a, b) => b[1] - a[1]).slice(0, top)
const lines = [
  `${files.length} profile(s)${bySamples ? ', by sample count' : ', by time'}: ${ms(busy)} ms busy, ${ms(idle)} ms idle${perEvent(busy)}`,
  '',
  'self time by module:',
  ...sorted(selfByModule).map(
    ([m, us]) => `  ${percent(us).padStart(7)}  ${ms(us).padStart(6)} ms  ${m}${perEvent(us)}`,
  ),
  '',
  'self time by owner (the innermost package or project file on the stack):',
  ...sorted(selfByOwner).map(
    ([m, us]) => `  ${percent(us).padStart(7)}  ${ms(us).padStart(6)} ms  ${m}${perEvent(us)}`,
  ),
  '',
  'inclusive time by module (a frame of it anywhere on the stack):',
  ...sorted(inclusiveByModule).map(
    ([m, us]) => `  ${percent(us).padStart(7)}  ${ms(us).padStart(6)} ms  ${m}`,
  ),
  '',
  'self time by function:',
  ...sorted(selfByFunction).map(([f, us]) => `  ${percent(us).padStart(7)}  ${ms(us).padStart(6)} ms  ${f}`),
]
process.stdout.write(`${lines.join('\n')}\n`)
