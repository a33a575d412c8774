/** A promise the test resolves when it chooses: what a held handler, request, lock or step waits for. */
export function gate(): { opened: Promise<void>; open: () => void } {
  let open: () => void = () => {}
  const opened = new Promise<void>((resolve) => {
    open = resolve
  })
  return { opened, open: () => open() }
}
