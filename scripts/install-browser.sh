#!/bin/sh
# Makes sure a headless browser and its WebDriver are on this machine, for
# the console tests that drive the operator console in a real browser
# (host/tests/console_browser.rs). Does nothing when `chromium` and
# `chromedriver` are found; otherwise installs Debian's `chromium` and
# `chromium-driver` with apt-get, as root or through a password-less sudo.
set -eu

have_browser() {
    command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1
}

if have_browser; then
    exit 0
fi

me=install-browser.sh
what="chromium and chromedriver"
package="chromium and chromium-driver"
need="Chromium and its WebDriver; on Debian: apt-get install chromium chromium-driver"
have() { have_browser; }
. "$(dirname "$0")/apt-install.sh"
apt_prepare

echo "install-browser.sh: installing chromium and chromium-driver from the distribution's packages (apt-get, a minute or two)" >&2
install_browser() {
    apt install -y --no-install-recommends chromium chromium-driver
}
apt_install_with install_browser

if ! have_browser; then
    echo "install-browser.sh: apt-get installed the packages but chromium or chromedriver is still not on PATH; install $need" >&2
    exit 1
fi
