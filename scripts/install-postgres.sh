#!/bin/sh
# Makes sure a PostgreSQL server (initdb, pg_ctl, postgres, createdb, psql)
# is on this machine, for the tests that start throwaway servers
# (tools/testkit). Does nothing when initdb is already found where the
# testkit looks for it; otherwise installs Debian's `postgresql` package
# with apt-get, as root or through a password-less sudo. A fresh CI
# machine may lack it: the project's own files must install what it needs.
set -eu

# The same places tools/testkit searches, in the same order, so that
# "found here" means "found there".
have_initdb() {
    if command -v pg_config >/dev/null 2>&1; then
        bindir=$(pg_config --bindir 2>/dev/null || true)
        if [ -n "$bindir" ] && [ -x "$bindir/initdb" ]; then
            return 0
        fi
    fi
    for bin in /usr/lib/postgresql/*/bin; do
        if [ -x "$bin/initdb" ]; then
            return 0
        fi
    done
    command -v initdb >/dev/null 2>&1
}

if have_initdb; then
    exit 0
fi

need="PostgreSQL's server programs (initdb, pg_ctl, postgres) and clients (createdb, psql); on Debian or Ubuntu: apt-get install postgresql"

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-postgres.sh: initdb not found and there is no apt-get here; install $need" >&2
    exit 127
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    # -n: a test must never sit waiting for a password prompt.
    as_root="sudo -n"
else
    echo "install-postgres.sh: initdb not found, and installing needs root (not root, no password-less sudo); install $need" >&2
    exit 126
fi

# Two test processes may start this at once, and dpkg takes its own lock
# and fails rather than waits: the second one waits here, then finds the
# programs the first one installed. The lock is on this script itself,
# opened for reading: any user can, and no lock file is left in /tmp for
# another user to own.
if command -v flock >/dev/null 2>&1; then
    exec 9<"$0"
    flock 9
    if have_initdb; then
        exit 0
    fi
fi

echo "install-postgres.sh: installing PostgreSQL from the distribution's packages (apt-get, about a minute)" >&2
# DEBIAN_FRONTEND through env(1), since sudo drops the caller's environment:
# no debconf question may wait for an answer nobody will give.
# --no-install-recommends: only the server and its clients, not the
# recommended extras. Debian's package also creates (and may start) a
# `main` cluster on port 5432; the tests never use it, they pick free ports.
# A fresh machine may have no package lists yet: then the first install
# fails, and one `apt-get update` is what it takes.
apt() {
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@" >&2
}
if ! apt install -y --no-install-recommends postgresql; then
    echo "install-postgres.sh: install failed; updating the package lists and trying again" >&2
    if ! apt update || ! apt install -y --no-install-recommends postgresql; then
        echo "install-postgres.sh: apt-get could not install postgresql; install $need" >&2
        exit 1
    fi
fi

if ! have_initdb; then
    echo "install-postgres.sh: apt-get installed postgresql but initdb is still not found; install $need" >&2
    exit 1
fi
