import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          // Pure functions and middleware beside the code they test: no database, no Redis, no
          // child process, so files run in parallel and the tier finishes in seconds.
          name: 'unit',
          include: ['src/**/*.test.ts'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          // Each file makes its own database and queue prefix, but crash and outage tests start servers
          // and measure recovery on two cores: running files one at a time keeps their timings honest.
          // After the unit tier, so no unit file competes with the first of them.
          fileParallelism: false,
          sequence: { groupOrder: 1 },
          testTimeout: 30_000,
          hookTimeout: 60_000,
          // Checks PostgreSQL and Redis, and builds dist/ if stale: child processes run from it.
          globalSetup: ['test/support/global-setup.ts'],
        },
      },
    ],
  },
})
