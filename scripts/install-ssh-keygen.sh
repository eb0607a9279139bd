#!/bin/sh
# Makes sure `ssh-keygen` is on this machine, for the approvals test that
# makes real SSH keys and checks the fingerprints an approver is shown
# against the ones OpenSSH itself prints. Does nothing when ssh-keygen is
# found; otherwise installs Debian's `openssh-client` with apt-get, as root
# or through a password-less sudo.
set -eu

have_keygen() {
    command -v ssh-keygen >/dev/null 2>&1
}

if have_keygen; then
    exit 0
fi

me=install-ssh-keygen.sh
what=ssh-keygen
package=openssh-client
need="OpenSSH's ssh-keygen; on Debian or Ubuntu: apt-get install openssh-client"
have() { have_keygen; }
. "$(dirname "$0")/apt-install.sh"
apt_prepare

echo "install-ssh-keygen.sh: installing openssh-client from the distribution's packages (apt-get, a few seconds)" >&2
install_client() {
    apt install -y --no-install-recommends openssh-client
}
apt_install_with install_client

if ! have_keygen; then
    echo "install-ssh-keygen.sh: apt-get installed openssh-client but ssh-keygen is still not on PATH; install $need" >&2
    exit 1
fi
