// Loaded with `node --import` into a child process a test measures: at exit, it writes the process's
// peak resident set size (getrusage's ru_maxrss, in kilobytes) to the file PEAK_RSS_FILE names. The
// kernel keeps that peak itself, so no sampling can miss a short spike.
import { writeFileSync } from 'node:fs'

const file = process.env.PEAK_RSS_FILE
if (file !== undefined && file !== '') {
  process.on('exit', () => writeFileSync(file, String(process.resourceUsage().maxRSS)))
}
