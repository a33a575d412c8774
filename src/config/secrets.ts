import { ConfigError } from './errors.js'

/** Where `env:NAME` references are looked up: the process environment, or a test's own values. */
export type Lookup = (name: string) => string | undefined

/** Resolves a secret reference from the config file (`env:NAME` or a literal) for `field`'s messages. */
export type SecretResolver = (reference: string, field: string) => string

/** A secret as the config file names it: `env:NAME` is looked up, anything else is the value itself. */
export function resolveSecretReference(reference: string, field: string, lookup: Lookup): string {
  if (!reference.startsWith('env:')) return reference
  const name = reference.slice('env:'.length)
  const value = lookup(name)
  if (value === undefined) throw new ConfigError(`${field}: environment variable ${name} is not set`)
  return value
}
