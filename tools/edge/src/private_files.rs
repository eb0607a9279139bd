//! Airlock's state — the approval store and the audit log — belongs to the
//! user running Airlock and no one else: whoever can write an approval row
//! approves calls, and whoever can rewrite the audit log rewrites history.
//!
//! So directories are created 0700 and files 0600, and a directory that
//! already exists is used only if it is a real directory (a symbolic link
//! as the last component is refused, not followed: another user could
//! point it elsewhere), owned by this process's effective user, and not
//! writable by group or others. Each refusal names the path, what is wrong
//! and the command that fixes it.

use std::{
    fs::{DirBuilder, OpenOptions},
    io,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    path::Path,
};

/// Mode of directories Airlock creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of files Airlock creates.
pub const FILE_MODE: u32 = 0o600;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateDirError {
    #[error("cannot create the state directory {path}: {message}")]
    Create { path: String, message: String },
    #[error("cannot inspect the state directory {path}: {message}")]
    Inspect { path: String, message: String },
    #[error("the state directory {path} is a symbolic link, which Airlock does not follow (whoever can change the link chooses where approvals and the audit log go); configure the real directory's path, or replace the link with a directory of your own: rm {path} && mkdir -m 700 {path}")]
    Symlink { path: String },
    #[error("the state directory {path} is not a directory; move it away or configure another state directory")]
    NotDirectory { path: String },
    #[error("the state directory {path} belongs to uid {owner}, not to this user (uid {me}), who could then not keep its approvals and audit log to itself, and whose files there its owner could not use; run the command as its owner (for the Debian package's /var/lib/airlock: sudo -u airlock airlock ...), or use a directory of your own")]
    NotOwned { path: String, owner: u32, me: u32 },
    #[error("the state directory {path} does not exist, and would be made inside {parent}, which belongs to uid {owner} (this user is uid {me}) or which others may write to: they could replace it, or could not use what this command made there; run the command as its owner (for the Debian package's /var/lib/airlock: sudo -u airlock airlock ...), or use a directory of your own")]
    InsideOthers {
        path: String,
        parent: String,
        owner: u32,
        me: u32,
    },
    #[error("the state directory {path} is writable by {who} (mode {mode:03o}), who could then approve calls or rewrite the audit log; fix: chmod 700 {path}")]
    Writable {
        path: String,
        who: &'static str,
        mode: u32,
    },
    #[error("cannot create {path} with mode 600: {message}")]
    File { path: String, message: String },
}

/// The effective user id of this process: what the kernel checks a file's
/// owner against.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The directory a state file at `file` lives in (`.` for a bare name).
pub fn parent_of(file: &Path) -> &Path {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates `dir` (and missing parents) 0700 if it does not exist, then
/// checks that it is this user's own directory that only this user can
/// write.
pub fn private_dir(dir: &Path) -> Result<(), StateDirError> {
    let path = || dir.display().to_string();
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            not_inside_others(dir)?;
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(|e| StateDirError::Create {
                    path: path(),
                    message: e.to_string(),
                })?
        }
        Err(e) => {
            return Err(StateDirError::Inspect {
                path: path(),
                message: e.to_string(),
            })
        }
        Ok(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| StateDirError::Inspect {
        path: path(),
        message: e.to_string(),
    })?;
    if meta.file_type().is_symlink() {
        return Err(StateDirError::Symlink { path: path() });
    }
    if !meta.is_dir() {
        return Err(StateDirError::NotDirectory { path: path() });
    }
    let me = effective_uid();
    if meta.uid() != me {
        return Err(StateDirError::NotOwned {
            path: path(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    match let_in(mode, GROUP_WRITE, OTHERS_WRITE) {
        None => Ok(()),
        Some(who) => Err(StateDirError::Writable {
            path: path(),
            who,
            mode,
        }),
    }
}

/// A directory about to be made must not go inside another user's, at
/// any depth (root's directories, such as /var/lib, are everyone's
/// parents): root making `/var/lib/airlock/simulated` would leave the
/// service a directory it may not use, and whoever owns or may write to
/// an ancestor can swap what is below it. Links on the way are judged as
/// links (their owner), and an ancestor that cannot be inspected refuses.
fn not_inside_others(dir: &Path) -> Result<(), StateDirError> {
    let me = effective_uid();
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    for parent in absolute.ancestors().skip(1) {
        let meta = match std::fs::symlink_metadata(parent) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(StateDirError::Inspect {
                    path: parent.display().to_string(),
                    message: e.to_string(),
                })
            }
        };
        let owner = meta.uid();
        let shared = meta.is_dir()
            && let_in(meta.mode(), GROUP_WRITE, OTHERS_WRITE).is_some()
            && meta.mode() & STICKY == 0;
        if !mine_or_root_s(owner, me) || shared {
            return Err(StateDirError::InsideOthers {
                path: dir.display().to_string(),
                parent: parent.display().to_string(),
                owner,
                me,
            });
        }
    }
    Ok(())
}

/// Refuses an existing directory that belongs to another user than this
/// one or root, for files made in it one at a time (a first enrollment
/// file in the service's state directory, made by root, would be root's
/// and stop the service).
pub fn not_another_users(dir: &Path) -> Result<(), StateDirError> {
    let me = effective_uid();
    let meta = std::fs::metadata(dir).map_err(|e| StateDirError::Inspect {
        path: dir.display().to_string(),
        message: e.to_string(),
    })?;
    match meta.uid() {
        owner if mine_or_root_s(owner, me) => Ok(()),
        owner => Err(StateDirError::NotOwned {
            path: dir.display().to_string(),
            owner,
            me,
        }),
    }
}

/// Whether a directory `owner` owns is safe to make things in for user
/// `me`: their own, or root's (whom nothing stops anyway).
fn mine_or_root_s(owner: u32, me: u32) -> bool {
    owner == me || owner == 0
}

/// The sticky bit: in a directory others may write, only a file's owner
/// may remove or rename it (/tmp).
const STICKY: u32 = 0o1000;

/// Mode bits by which the group may write.
pub(crate) const GROUP_WRITE: u32 = 0o020;
/// Mode bits by which every other user may write.
pub(crate) const OTHERS_WRITE: u32 = 0o002;

/// Who besides the owner `mode` lets in through its `group` and `others`
/// bits, as the refusals name them; `None` when nobody.
pub(crate) fn let_in(mode: u32, group: u32, others: u32) -> Option<&'static str> {
    match (mode & group != 0, mode & others != 0) {
        (false, false) => None,
        (true, false) => Some("its group"),
        (false, true) => Some("every user"),
        (true, true) => Some("its group and every user"),
    }
}

/// Creates `file` 0600 if it does not exist; an existing file is left as
/// it is. Called before a library (SQLite) opens it, so that it never
/// exists with a wider mode, even for a moment.
pub fn private_file(file: &Path) -> Result<(), StateDirError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(file)
        .map(drop)
        .map_err(|e| StateDirError::File {
            path: file.display().to_string(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o777
    }

    #[test]
    fn creates_private_directories_and_files() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&root.path().join("a")), 0o700, "parents too");
        let file = dir.join("f");
        private_file(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        private_dir(&dir).unwrap();
    }

    #[test]
    fn refuses_shared_directories_and_links() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("shared");
        std::fs::create_dir(&dir).unwrap();
        for (m, who) in [
            (0o770, "its group"),
            (0o757, "every user"),
            (0o1777, "its group and every user"),
        ] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(m)).unwrap();
            let e = private_dir(&dir).unwrap_err();
            assert!(
                matches!(&e, StateDirError::Writable { who: w, .. } if *w == who),
                "{e}"
            );
            let text = e.to_string();
            assert!(
                text.contains(&dir.display().to_string()) && text.contains("chmod 700"),
                "{text}"
            );
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();

        let link = root.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(matches!(e, StateDirError::Symlink { .. }), "{e}");

        // Another user's directory (only root can make one to test with).
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        if std::os::unix::fs::chown(&theirs, Some(65534), None).is_ok() {
            let e = private_dir(&theirs).unwrap_err();
            assert!(
                matches!(e, StateDirError::NotOwned { owner: 65534, .. }),
                "{e}"
            );
            assert!(e.to_string().contains("sudo -u airlock"), "{e}");
            // Nor is a directory made inside it, at any depth.
            let inside = theirs.join("simulated/deeper");
            let e = private_dir(&inside).unwrap_err();
            assert!(
                matches!(&e, StateDirError::InsideOthers { owner: 65534, parent, .. }
                    if *parent == theirs.display().to_string()),
                "{e}"
            );
            assert!(!theirs.join("simulated").exists(), "nothing made");
        }
        // Inside a directory others may write to, unless it is sticky.
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&open.join("a/b")).unwrap_err();
        assert!(matches!(e, StateDirError::InsideOthers { .. }), "{e}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&open.join("a/b")).unwrap();

        let file = root.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            private_dir(&file),
            Err(StateDirError::NotDirectory { .. })
        ));
    }
}
