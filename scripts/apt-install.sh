# Sourced by the install-*.sh scripts, not run: what installing a Debian
# package for a test takes, written once. The sourcing script sets `me`
# (its name, for messages), `what` (the program it looks for), `package`
# (the package name, for messages), `need` (what to install by hand if
# this cannot) and defines `have` (true when the program is already
# there), then calls:
#
#   apt_prepare        # apt-get and root (or a password-less sudo), else exit;
#                      # the install lock; exit 0 if another process installed it
#   apt_install_with F # runs function F (which installs, through `apt`); on
#                      # failure updates the package lists once and runs F again

apt_prepare() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$me: $what not found and there is no apt-get here; install $need" >&2
        exit 127
    fi
    if [ "$(id -u)" -eq 0 ]; then
        as_root=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        # -n: a test must never sit waiting for a password prompt.
        as_root="sudo -n"
    else
        echo "$me: $what not found, and installing needs root (not root, no password-less sudo); install $need" >&2
        exit 126
    fi
    # Two test processes may start this at once, and dpkg takes its own
    # lock and fails rather than waits: the second one waits here, then
    # finds what the first one installed. The lock is on the sourcing
    # script itself, opened for reading: any user can, and no lock file is
    # left in /tmp for another user to own.
    if command -v flock >/dev/null 2>&1; then
        exec 9<"$0"
        flock 9
        if have; then
            exit 0
        fi
    fi
}

# DEBIAN_FRONTEND through env(1), since sudo drops the caller's
# environment: no debconf question may wait for an answer nobody will give.
apt() {
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@" >&2
}

# A fresh machine may have no package lists yet: then the first install
# fails, and one `apt-get update` is what it takes.
apt_install_with() {
    if ! "$1"; then
        echo "$me: install failed; updating the package lists and trying again" >&2
        if ! apt update || ! "$1"; then
            echo "$me: apt-get could not install $package; install $need" >&2
            exit 1
        fi
    fi
}
