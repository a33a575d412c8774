#!/bin/sh
# `npm test`'s pretest step (and .ci/run's, through npm test): the Debian packages some tests drive.
#   chromium   the admin page's browser test (through playwright-core, which downloads no browser)
#   pgbouncer  the PgBouncer tests start their own on a free port (the binary only: the package's own
#              service is stopped again when this step installed it)
#   nftables   the silent-path test drops a flow's packets in the kernel (test/support/silent-path.ts)
# Installs what is missing when we are root; otherwise stops the run with one line saying what to
# install, never a silent skip.
set -eu
find_missing() {
  missing=""
  [ -x /usr/bin/chromium ] || missing="$missing chromium"
  [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || missing="$missing pgbouncer"
  [ -x /usr/sbin/nft ] || missing="$missing nftables"
}
find_missing
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "pretest: installing Debian's$missing (apt-get): tests drive them" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another apt (unattended upgrades, a second test run) may hold the dpkg and lists locks: wait for
  # them, up to 5 minutes, rather than fail the run outright.
  apt-get -o DPkg::Lock::Timeout=300 update -q >&2
  # shellcheck disable=SC2086 # one word per package
  apt-get -o DPkg::Lock::Timeout=300 install -y -q $missing >&2
  case "$missing" in *pgbouncer*) service pgbouncer stop >/dev/null 2>&1 || true ;; esac
  find_missing
  [ -z "$missing" ] && exit 0
fi
echo "pretest: the tests need Debian's$missing: install them (as root: apt-get install$missing) and run npm test again" >&2
exit 1
