import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    // Pure unit tests live beside the code they test (src/**); everything else under test/.
    include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
    // Each file makes its own database and queue prefix, but crash and outage tests start servers
    // and measure recovery on two cores: running files one at a time keeps their timings honest.
    fileParallelism: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ['test/support/global-setup.ts'],
  },
})
