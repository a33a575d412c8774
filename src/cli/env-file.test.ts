import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { EnvironmentError } from '../config/env.js'
import { readCommandLine } from './env-file.js'

const folder = mkdtempSync(join(tmpdir(), 'hookledger-env-file-'))
afterAll(() => rmSync(folder, { recursive: true, force: true }))
const envFile = join(folder, 'test.env')
writeFileSync(envFile, '# a comment\nSHOP_SECRET=from-file\nPORT=4000\nDATABASE_URL=\n')

describe('--env-file', () => {
  it('reads the named file under the environment: a variable already set wins', () => {
    const line = readCommandLine(['sign', '--env-file', envFile, '--source', 'shop', 'f.json'], {
      PORT: '5000',
    })
    expect(line.args).toEqual(['sign', '--source', 'shop', 'f.json'])
    expect(line.envFile).toBe(envFile)
    expect(line.environment).toMatchObject({ SHOP_SECRET: 'from-file', PORT: '5000', DATABASE_URL: '' })
  })

  it('takes the --env-file=PATH spelling too', () => {
    const line = readCommandLine([`--env-file=${envFile}`, 'serve'], {})
    expect(line.args).toEqual(['serve'])
    expect(line.environment.SHOP_SECRET).toBe('from-file')
  })

  it('names a file it cannot read, and a flag without a path', () => {
    expect(() => readCommandLine(['sign', '--env-file', join(folder, 'missing.env')], {})).toThrow(
      new EnvironmentError([`--env-file: cannot read ${join(folder, 'missing.env')}: ENOENT`]),
    )
    expect(() => readCommandLine(['sign', '--env-file'], {})).toThrow(/--env-file: needs a PATH/)
  })
})
