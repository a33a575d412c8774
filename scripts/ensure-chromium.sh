#!/bin/sh
# `npm test`'s pretest step (and .ci/run's, through npm test): the admin page's browser test drives
# Debian's chromium through playwright-core, which downloads no browser. Installs it when missing and
# we are root; otherwise stops the run with one line saying what to install, never a silent skip.
set -eu
CHROMIUM=/usr/bin/chromium
[ -x "$CHROMIUM" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "pretest: $CHROMIUM is missing; installing Debian's chromium (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another apt (unattended upgrades, a second test run) may hold the dpkg and lists locks: wait for
  # them, up to 5 minutes, rather than fail the run outright.
  apt-get -o DPkg::Lock::Timeout=300 update -q >&2
  apt-get -o DPkg::Lock::Timeout=300 install -y -q chromium >&2
  [ -x "$CHROMIUM" ] && exit 0
fi
echo "pretest: the admin page's browser test needs $CHROMIUM: install Debian's chromium (as root: apt-get install chromium) and run npm test again" >&2
exit 1
