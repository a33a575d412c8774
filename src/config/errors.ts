/** A config file, secret or setting the operator must fix: printed as one line, never a stack trace. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}
