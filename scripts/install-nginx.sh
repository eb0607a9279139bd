#!/bin/sh
# Makes sure an nginx binary is on this machine, for the tests that start a
# throwaway nginx load balancer (tools/testkit, TempNginx). Does nothing
# when nginx is already found where the testkit looks for it; otherwise
# installs Debian's `nginx` package (or, failing that, `nginx-light`) with
# apt-get, as root or through a password-less sudo. A fresh CI machine may
# lack it: the project's own files must install what it needs.
set -eu

# The same places tools/testkit searches, in the same order, so that
# "found here" means "found there". /usr/sbin is often not on a normal
# user's PATH, and that is where Debian puts nginx.
have_nginx() {
    if command -v nginx >/dev/null 2>&1; then
        return 0
    fi
    for nginx in /usr/sbin/nginx /usr/local/sbin/nginx /usr/local/nginx/sbin/nginx; do
        if [ -f "$nginx" ] && [ -x "$nginx" ]; then
            return 0
        fi
    done
    return 1
}

if have_nginx; then
    exit 0
fi

me=install-nginx.sh
what=nginx
package="nginx or nginx-light"
need="the nginx web server (only its binary is used); on Debian or Ubuntu: apt-get install nginx"
have() { have_nginx; }
. "$(dirname "$0")/apt-install.sh"
apt_prepare

echo "install-nginx.sh: installing nginx from the distribution's packages (apt-get, under a minute)" >&2
# --no-install-recommends: only nginx itself, not the recommended extras.

# Debian's package also starts a system nginx on port 80 (the tests never
# use it: they run their own, on free loopback ports). When port 80 is
# already taken that start fails, dpkg leaves the package half-configured
# and apt-get exits non-zero although the binary is in place: that still
# counts, since the binary is all the tests need.
install_one() {
    if apt install -y --no-install-recommends "$1"; then
        return 0
    fi
    if have_nginx; then
        echo "install-nginx.sh: apt-get reported a failure installing $1, but the nginx binary is in place (Debian's package could not start its own system nginx, perhaps because port 80 is taken); carrying on, the tests do not use that one" >&2
        return 0
    fi
    return 1
}

# `nginx` first, then the smaller `nginx-light` flavour (not in every
# release).
install_any() {
    install_one nginx || install_one nginx-light
}
apt_install_with install_any

if ! have_nginx; then
    echo "install-nginx.sh: apt-get installed nginx but the nginx binary is still not found (PATH, /usr/sbin, /usr/local/sbin, /usr/local/nginx/sbin); install $need" >&2
    exit 1
fi
