import type postgres from 'postgres'
import type { Config, Source } from '../config/config.js'
import { ConfigError } from '../config/errors.js'
import {
  type DedupKeyState,
  dedupKeyStates,
  recordDedupKey,
  underDedupKeyLock,
  type VersionedDedupKey,
} from '../db/dedup-keys.js'
import type { Logger } from '../logger.js'
import { canonicalJson } from '../outbound/hash.js'
import { type DedupKeyDefinition, definitionOf, PROVIDER_EVENT_ID } from './dedup-key.js'

export type VersionedDefinition = VersionedDedupKey<DedupKeyDefinition>

/** The definition a source's config asks for (version 1, the provider's event id, when it names none). */
export function configuredDedupKey(source: Source): VersionedDefinition {
  return { version: source.config.dedupKey?.version ?? 1, definition: definitionOf(source.config.dedupKey) }
}

/**
 * The definition a source's kept events were keyed by, or undefined when it has none (it may then
 * take any). Sources whose events predate source_dedup_keys were keyed by the provider's event id,
 * version 1.
 */
export function eventsKeyedBy(state: DedupKeyState<DedupKeyDefinition>): VersionedDefinition | undefined {
  if (!state.hasEvents) return undefined
  return state.recorded ?? { version: 1, definition: PROVIDER_EVENT_ID }
}

/**
 * Why `wanted` may not replace `recorded` for a source that has events, or undefined when it may:
 * the same definition and version, or a higher version (raising it is the operator's decision).
 * Start-up refuses on it; `hookledger doctor` reports it.
 */
export function dedupKeyDrift(
  id: string,
  recorded: VersionedDefinition,
  wanted: VersionedDefinition,
): string | undefined {
  const same = sameDefinition(recorded.definition, wanted.definition)
  if (same && recorded.version === wanted.version) return undefined
  if (wanted.version > recorded.version) return undefined
  return same
    ? `source '${id}': dedupKey.version ${wanted.version} is lower than the version ${recorded.version} its events are keyed by; versions only go up`
    : `source '${id}': dedupKey differs from the definition its events are keyed by (version ${recorded.version}: ${describe(recorded.definition)}; now: ${describe(wanted.definition)}). Restore it, or set dedupKey.version to ${recorded.version + 1} to key new events the new way: deliveries of events received before are then not recognised as duplicates`
}

/**
 * Compares each source's dedup key with the one its stored events were keyed by, before anything is
 * received. The same definition: nothing to do. Another definition under the same (or a lower)
 * version: refused, because the events already kept would no longer meet their own retries (split)
 * or would meet other events (merge) without anyone having decided so. A higher version: recorded,
 * with a warning, since raising it is that decision. A source with no events yet takes any definition.
 */
export async function checkDedupKeys(sql: postgres.Sql, config: Config, logger: Logger): Promise<void> {
  const problems: string[] = []
  for (const [id, source] of config.sources) {
    const wanted = configuredDedupKey(source)
    const problem = await underDedupKeyLock(sql, id, async (tx) => {
      const [state] = await dedupKeyStates<DedupKeyDefinition>(tx, [id])
      const keyedBy = state === undefined ? undefined : eventsKeyedBy(state)
      if (keyedBy !== undefined) {
        const problem = dedupKeyDrift(id, keyedBy, wanted)
        if (problem !== undefined) return problem
        if (keyedBy.version === wanted.version) return undefined
        logger.warn(
          { source: id, from: keyedBy.version, to: wanted.version },
          'dedup key version raised: retries of events received under the old key are accepted as new events',
        )
      }
      await recordDedupKey(tx, id, wanted)
      return undefined
    })
    if (problem !== undefined) problems.push(problem)
  }
  if (problems.length > 0) {
    throw new ConfigError(`invalid config:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  }
}

// jsonb reorders object keys, so definitions are compared as canonical JSON (RFC 8785).
const sameDefinition = (a: DedupKeyDefinition, b: DedupKeyDefinition) => canonicalJson(a) === canonicalJson(b)

function describe(definition: DedupKeyDefinition): string {
  const parts = definition.parts.map((part) =>
    'eventId' in part
      ? "the provider's event id"
      : 'pointer' in part
        ? part.pointer
        : `header ${part.header}`,
  )
  return `${definition.scope === null ? '' : 'event type + '}${parts.join(' + ')}`
}
