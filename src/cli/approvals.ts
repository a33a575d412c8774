import { assertNever } from '../assert.js'
import { openLedger } from '../db/client.js'
import { listApprovals } from '../db/operation-queries.js'
import { type Decision, decide, showApproval } from '../outbound/approvals.js'
import { CliError, parseCommandLine, parseJsonFlag, usageError } from './errors.js'

export const APPROVALS_USAGE = `  hookledger approvals list [--all]                          pending approvals (--all: decided too)
  hookledger approvals show ID                               key, tool, args, effect, attempts, evidence, proposal
  hookledger approvals decide ID --decision retry|record_success|abandon --by NAME
             [--payload-hash HASH] [--evidence JSON] [--result JSON] [--note TEXT]`

const DECISIONS: readonly Decision[] = ['retry', 'record_success', 'abandon']

/** `hookledger approvals …`: the human gate from a terminal, on the ledger database directly. */
export async function approvalsCommand(
  args: string[],
  databaseUrl: () => Promise<string>,
  out: (text: string) => void,
): Promise<number> {
  const [sub, ...rest] = args
  // The arguments are checked before the ledger is looked for: a mistyped id is named as such,
  // whether or not a ledger is running.
  let ledger: ReturnType<typeof openLedger> | undefined
  const db = async () => {
    ledger ??= openLedger(await databaseUrl(), { max: 2 })
    return ledger.db
  }
  try {
    switch (sub) {
      case 'list': {
        const { values } = parseCommandLine({
          args: rest,
          options: { all: { type: 'boolean', default: false } },
          strict: true,
        })
        const rows = await listApprovals(await db(), values.all ? {} : { status: 'pending' })
        for (const row of rows) {
          out(
            `${row.id}  ${row.status}  ${row.tool} (${row.effect})  ${row.operationKey}  ${row.reason}  proposed: ${row.proposedAction}`,
          )
        }
        if (rows.length === 0) out('no approvals')
        return 0
      }
      case 'show': {
        const { positionals } = parseCommandLine({ args: rest, allowPositionals: true, strict: true })
        const id = positionals[0]
        if (id === undefined) throw usageError('approvals show needs an approval ID')
        assertApprovalId(id)
        const view = await showApproval(await db(), id)
        if (view === undefined) throw new CliError(`no approval ${id}`)
        out(JSON.stringify(view, null, 2))
        return 0
      }
      case 'decide': {
        const { values, positionals } = parseCommandLine({
          args: rest,
          allowPositionals: true,
          strict: true,
          options: {
            decision: { type: 'string' },
            by: { type: 'string' },
            'payload-hash': { type: 'string' },
            evidence: { type: 'string' },
            result: { type: 'string' },
            note: { type: 'string' },
          },
        })
        const decision = values.decision as Decision
        const [id] = positionals
        if (id === undefined || !DECISIONS.includes(decision) || values.by === undefined) {
          throw usageError(`approvals decide needs an ID, --decision ${DECISIONS.join('|')} and --by NAME`)
        }
        assertApprovalId(id)
        const evidence = parseJsonFlag(values.evidence, '--evidence')
        const result = parseJsonFlag(values.result, '--result')
        const outcome = await decide(await db(), {
          approvalId: id,
          decision,
          by: values.by,
          payloadHash: values['payload-hash'],
          evidence,
          result,
          note: values.note,
        })
        switch (outcome.kind) {
          case 'decided':
            out(`${outcome.operationKey}: ${decision} recorded; the operation is now ${outcome.status}`)
            return 0
          case 'not_found':
            throw new CliError(`no approval ${id}`)
          case 'already_decided':
            throw new CliError(`already decided (${outcome.decision ?? 'none'} by ${outcome.by ?? 'nobody'})`)
          case 'payload_mismatch':
            throw new CliError(
              `a retry is bound to the arguments shown: their payload hash is ${outcome.expected}`,
            )
          case 'invalid':
            throw new CliError(outcome.message)
          default:
            return assertNever(outcome)
        }
      }
      default:
        throw usageError(`approvals: unknown subcommand '${sub ?? ''}' (list, show or decide)`)
    }
  } finally {
    await ledger?.close()
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** An approval id is a uuid: anything else is a mistake to name, not a query for the database to refuse. */
function assertApprovalId(id: string): void {
  if (!UUID.test(id)) {
    throw usageError(
      `'${id}' is not an approval id: approval ids are uuids, as \`hookledger approvals list\` prints them`,
    )
  }
}
