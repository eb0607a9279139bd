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

me=install-postgres.sh
what=initdb
package=postgresql
need="PostgreSQL's server programs (initdb, pg_ctl, postgres) and clients (createdb, psql); on Debian or Ubuntu: apt-get install postgresql"
have() { have_initdb; }
. "$(dirname "$0")/apt-install.sh"
apt_prepare

echo "install-postgres.sh: installing PostgreSQL from the distribution's packages (apt-get, about a minute)" >&2
# --no-install-recommends: only the server and its clients, not the
# recommended extras. Debian's package also creates (and may start) a
# `main` cluster on port 5432; the tests never use it, they pick free ports.
install_postgresql() {
    apt install -y --no-install-recommends postgresql
}
apt_install_with install_postgresql

if ! have_initdb; then
    echo "install-postgres.sh: apt-get installed postgresql but initdb is still not found; install $need" >&2
    exit 1
fi
