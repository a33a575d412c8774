// The tests' own settings. They read the environment directly (the service never does) so that a
// machine with other store addresses can point the suite at them.

/** A database on the test server that exists everywhere; per-run databases are created from it. */
export function adminDatabaseUrl(): string {
  return process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
}

export function testRedisUrl(): string {
  return process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
}
