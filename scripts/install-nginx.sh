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

need="the nginx web server (only its binary is used); on Debian or Ubuntu: apt-get install nginx"

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-nginx.sh: nginx not found and there is no apt-get here; install $need" >&2
    exit 127
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    # -n: a test must never sit waiting for a password prompt.
    as_root="sudo -n"
else
    echo "install-nginx.sh: nginx not found, and installing needs root (not root, no password-less sudo); install $need" >&2
    exit 126
fi

# Two test processes may start this at once, and dpkg takes its own lock
# and fails rather than waits: the second one waits here, then finds the
# binary the first one installed. The lock is on this script itself,
# opened for reading: any user can, and no lock file is left in /tmp for
# another user to own.
if command -v flock >/dev/null 2>&1; then
    exec 9<"$0"
    flock 9
    if have_nginx; then
        exit 0
    fi
fi

echo "install-nginx.sh: installing nginx from the distribution's packages (apt-get, under a minute)" >&2
# DEBIAN_FRONTEND through env(1), since sudo drops the caller's environment:
# no debconf question may wait for an answer nobody will give.
# --no-install-recommends: only nginx itself, not the recommended extras.
apt() {
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@" >&2
}

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
# release). A fresh machine may have no package lists yet: then the first
# attempts fail, and one `apt-get update` is what it takes.
install_any() {
    install_one nginx || install_one nginx-light
}
if ! install_any; then
    echo "install-nginx.sh: install failed; updating the package lists and trying again" >&2
    if ! apt update || ! install_any; then
        echo "install-nginx.sh: apt-get could not install nginx or nginx-light; install $need" >&2
        exit 1
    fi
fi

if ! have_nginx; then
    echo "install-nginx.sh: apt-get installed nginx but the nginx binary is still not found (PATH, /usr/sbin, /usr/local/sbin, /usr/local/nginx/sbin); install $need" >&2
    exit 1
fi
