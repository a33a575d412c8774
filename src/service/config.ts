import { assembleConfig, type BuildOptions, type Config, type FeatureParts } from '../config/config.js'
import { readConfigFile } from '../config/file.js'
import type { Lookup } from '../config/secrets.js'
import { createVerifier } from '../inbound/verifiers/index.js'

/**
 * The one way to load a config, for the service, the CLI, the library API and tests. src/config/
 * holds the vocabulary and every check it can make alone; what needs a feature's code is handed in
 * here, where the features are assembled, so no import runs from config/ back up to them.
 */
const FEATURE_PARTS: FeatureParts = { createVerifier }

/**
 * Validates a parsed config file and builds its verifiers. Every problem names the source and the
 * field; secrets named as `env:NAME` are resolved through `lookup`, so none needs to be in the file.
 */
export function buildConfig(input: unknown, lookup: Lookup, options: BuildOptions = {}): Config {
  return assembleConfig(input, lookup, FEATURE_PARTS, options)
}

/** Reads and validates the config file at `path`. */
export async function loadConfig(path: string, lookup: Lookup, options: BuildOptions = {}): Promise<Config> {
  return buildConfig(await readConfigFile(path), lookup, options)
}
