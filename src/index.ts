export { type Config, ConfigError, type SourceConfig } from './config/config.js'
export { type Environment, EnvironmentError, readEnvironment } from './config/env.js'
export type { Delivery, RejectionCode, Verification, Verifier } from './config/verifier.js'
export type { Database, Transaction } from './db/client.js'
export { migrateLedger } from './db/migrate.js'
export * as schema from './db/schema.js'
export { forwardHandler } from './delivery/forward.js'
export { type AppDependencies, createApp } from './http/app.js'
export type { ReceiveOutcome } from './inbound/receive.js'
export { createLogger, type Logger } from './logger.js'
export { type Decision, decide as decideApproval } from './outbound/approvals.js'
export type { EventHandler, HandlerContext } from './outbound/event-handler.js'
export { payloadHash } from './outbound/hash.js'
export {
  type HttpToolArgs,
  type HttpToolOptions,
  type HttpToolResult,
  httpTool,
} from './outbound/http-tool.js'
export { stepKey } from './outbound/keys.js'
export {
  type CompensateOutcome,
  createOutboundLedger,
  type InvokeRequest,
  type OutboundLedger,
  type WaitOptions,
  type WaitResult,
} from './outbound/ledger.js'
export type { InvokeOutcome } from './outbound/outcomes.js'
export { type SagaStep, saga } from './outbound/saga.js'
export {
  defineTool,
  type EffectClass,
  type ExecuteResult,
  type OperationView,
  type ReconcileResult,
  type Tool,
  type ToolContext,
  type UndoResult,
} from './outbound/tools.js'
export { MAX_WAIT_MS } from './outbound/wait.js'
export { HandlerError, type HandlerResult } from './queue/handler.js'
export { buildConfig, loadConfig } from './service/config.js'
export { type Role, type Service, type ServiceOptions, startService } from './service/service.js'
