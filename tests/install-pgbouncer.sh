#!/bin/sh
# Installs PgBouncer (the Debian package `pgbouncer`) for the pooler tests,
# where it can: as root, or through a sudo that needs no password. Anywhere
# else it says why not and exits 0: the tests that need PgBouncer then skip
# with the same reason. `make test` and `make chaos` run this first.
set -u

binary=${PGBOUNCER:-/usr/sbin/pgbouncer}
if [ -x "$binary" ] || command -v pgbouncer >/dev/null 2>&1; then
    exit 0
fi

skip() {
    echo "pgbouncer: $1; the PgBouncer tests will be skipped" >&2
    exit 0
}

command -v apt-get >/dev/null 2>&1 || skip "not installed, and this is not a Debian/Ubuntu system (no apt-get)"

if [ "$(id -u)" = 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root="sudo -n"
else
    skip "not installed, and installing it needs root (or sudo without a password)"
fi

install() {
    # shellcheck disable=SC2086  # $as_root is empty or "sudo -n"
    DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends pgbouncer
}

echo "pgbouncer: installing the Debian package pgbouncer" >&2
# A fresh machine may have no package lists yet: update once and try again.
# shellcheck disable=SC2086
install || { $as_root apt-get update -qq && install; } || skip "apt-get install pgbouncer failed"
