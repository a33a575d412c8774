import type { Child, FC } from 'hono/jsx'

/** A value as a cell shows it; `class` is `mono` for ids, hashes and times. */
export interface Shown {
  value: string
  class?: string | undefined
}

/** One labelled fact of a detail page. */
export interface Fact extends Shown {
  name: string
}

/** A detail page's facts, one row each: the name, then the value. */
export const Facts: FC<{ facts: readonly Fact[] }> = ({ facts }) => (
  <table class="facts">
    <tbody>
      {facts.map((fact) => (
        <tr>
          <th>{fact.name}</th>
          <td class={fact.class}>{fact.value}</td>
        </tr>
      ))}
    </tbody>
  </table>
)

/**
 * One column of a list: its heading, and what each row shows under it: content under one class
 * (`mono` for ids and times, `err` for errors), or a text whose class depends on the row (`shown`).
 */
export type Column<T> = { head: string; style?: string } & (
  | { cell: (row: T) => Child; class?: string }
  | { shown: (row: T) => Shown }
)

/**
 * A list as a table: a heading per column, a row per item. With `empty`, an empty list is that
 * sentence instead of a table without rows.
 */
export function Table<T>(props: { columns: readonly Column<T>[]; rows: readonly T[]; empty?: string }) {
  if (props.rows.length === 0 && props.empty !== undefined) return <p class="muted">{props.empty}</p>
  return (
    <table>
      <thead>
        <tr>
          {props.columns.map((column) => (
            <th>{column.head}</th>
          ))}
        </tr>
      </thead>
      <tbody>
        {props.rows.map((row) => (
          <tr>
            {props.columns.map((column) => {
              if ('cell' in column) {
                return (
                  <td class={column.class} style={column.style}>
                    {column.cell(row)}
                  </td>
                )
              }
              const shown = column.shown(row)
              return (
                <td class={shown.class} style={column.style}>
                  {shown.value}
                </td>
              )
            })}
          </tr>
        ))}
      </tbody>
    </table>
  )
}

/**
 * An operation's last error: red while it matters; once the operation completed or was undone
 * (a person recorded success, say), it is history, shown muted as what happened before.
 */
export function lastError(status: string, error: string | null, max?: number): Shown {
  if (error === null) return { value: '' }
  const text = max !== undefined && error.length > max ? `${error.slice(0, max)}…` : error
  return status === 'completed' || status === 'compensated'
    ? { class: 'earlier', value: `earlier: ${text}` }
    : { class: 'err', value: text }
}
