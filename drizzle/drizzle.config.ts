import { defineConfig } from 'drizzle-kit'

// drizzle-kit's settings: `npm run db:generate` diffs src/db/schema.ts and outbound-schema.ts against the snapshots in
// migrations/meta and writes the next SQL file into migrations/, which `hookledger migrate` applies.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/db/schema.ts', './src/db/outbound-schema.ts'],
  out: './migrations',
  strict: true,
})
