#!/bin/sh
# Installs Chromium and its WebDriver (the Debian packages `chromium` and
# `chromium-driver`) for the dashboard's browser tests (tests/web/test_browser.py),
# where it can: as root, or through a sudo that needs no password. Anywhere
# else it says why not and exits 0: the browser tests then skip with the
# same reason. `make test` runs this first.
set -u

browser=${AWA_CHROMIUM:-/usr/bin/chromium}
driver=${AWA_CHROMEDRIVER:-/usr/bin/chromedriver}
if [ -x "$browser" ] && [ -x "$driver" ]; then
    exit 0
fi

skip() {
    echo "chromium: $1; the dashboard's browser tests will be skipped" >&2
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
    DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends chromium chromium-driver
}

echo "chromium: installing the Debian packages chromium and chromium-driver" >&2
# A fresh machine may have no package lists yet: update once and try again.
# shellcheck disable=SC2086
install || { $as_root apt-get update -qq && install; } || skip "apt-get install chromium chromium-driver failed"
