import { z } from 'zod'
import { isJsonPointer } from '../json-pointer.js'

/**
 * A configured JSON pointer (RFC 6901), one schema for every place a pointer is configured. With
 * `inside`, the whole document ("") is refused: a dedup key, an operation key or an ordering key is a
 * value in the body, never the body itself. `example` names a pointer the error message shows.
 */
export function jsonPointerSchema(example: string, options: { inside?: boolean } = {}) {
  const syntax = z
    .string()
    .refine(isJsonPointer, `must be a JSON pointer such as ${example} ("~1" for "/", "~0" for "~")`)
  if (!options.inside) return syntax
  return syntax.refine(
    (pointer) => pointer !== '',
    `must point inside the body, such as ${example} ("" is the whole body)`,
  )
}
