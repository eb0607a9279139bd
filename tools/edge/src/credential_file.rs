//! Files that hold a credential — a Proxmox API token, the collector's
//! service key, the database password, the metrics key, the enrolled
//! clients' key hashes — are checked as Airlock's state is: whoever else
//! can read one acts as Airlock, and whoever else can write one chooses
//! whom Airlock trusts.
//!
//! So a credential file is read only if it belongs to this process's
//! effective user and neither its group nor other users have any access
//! (mode 600 or 400, as `ssh` asks of a private key). The checks are made
//! on the opened file, so the file checked is the file read, and a
//! symbolic link to such a file is fine (systemd's `LoadCredential=`
//! directory, a secrets mount). Files Airlock writes are written whole
//! to a new 0600 file and renamed into place.
//! Each refusal names the file, what is wrong and the command that fixes
//! it; none quotes the file's contents.

use std::{
    fs::OpenOptions,
    io::{self, Read, Write},
    os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt},
    path::Path,
};

use crate::private_files::{
    effective_uid, let_in, parent_of, FILE_MODE, GROUP_WRITE, OTHERS_WRITE,
};

/// The most a credential file may hold: a token, a key or a password is a
/// line; an enrollment file a few lines per client.
pub const MAX_CREDENTIAL_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialFileError {
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path} belongs to uid {owner}, not to this user (uid {me}): whoever owns it can change the credential in it; fix: chown {me} {path} && chmod 600 {path}")]
    NotOwned { path: String, owner: u32, me: u32 },
    #[error("{path} is open to {who} (mode {mode:03o}), who could read or replace the credential in it; fix: chmod 600 {path}")]
    Exposed {
        path: String,
        who: &'static str,
        mode: u32,
    },
    #[error("{path} is not a regular file; name the file that holds the credential")]
    NotAFile { path: String },
    #[error("{path} is in {dir}, which {who} can write (mode {mode:03o}), who could then put another file in its place; keep credentials in a directory only you (or root) can write: chmod go-w {dir}")]
    OpenDirectory {
        path: String,
        dir: String,
        who: &'static str,
        mode: u32,
    },
    #[error(
        "{path} is larger than {limit} bytes, too large for a credential file; name the right file"
    )]
    TooLarge { path: String, limit: u64 },
    #[error("{path} is not UTF-8 text; a credential file holds one line of text")]
    NotText { path: String },
    #[error("cannot write {path}: {message}")]
    Write { path: String, message: String },
}

/// Reads the credential file at `path` after checking that it is this
/// user's alone.
pub fn read(path: &Path) -> Result<String, CredentialFileError> {
    let shown = || path.display().to_string();
    // The directories the name passes through last: the link's, and the
    // file's. Whoever can write one can swap what the name finds.
    let mut dirs = vec![parent_of(path).to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(path) {
        let real_dir = parent_of(&real);
        if real_dir != dirs[0] {
            dirs.push(real_dir.to_path_buf());
        }
    }
    for dir in dirs {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue; // the open below says what is wrong
        };
        let mode = meta.mode() & 0o7777;
        let sticky = mode & 0o1000 != 0;
        let owner_ok = meta.uid() == effective_uid() || meta.uid() == 0;
        let who = if sticky {
            None
        } else {
            let_in(mode, GROUP_WRITE, OTHERS_WRITE)
                .or((!owner_ok).then_some("its owner, another user,"))
        };
        if let Some(who) = who {
            return Err(CredentialFileError::OpenDirectory {
                path: shown(),
                dir: dir.display().to_string(),
                who,
                mode,
            });
        }
    }
    let read_error = |e: io::Error| CredentialFileError::Read {
        path: shown(),
        message: e.to_string(),
    };
    // Non-blocking: a FIFO or a terminal at the path must not hang the
    // start before it is found not to be a regular file.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        return Err(CredentialFileError::NotAFile { path: shown() });
    }
    let me = effective_uid();
    if meta.uid() != me {
        return Err(CredentialFileError::NotOwned {
            path: shown(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    if let Some(who) = let_in(mode, 0o070, 0o007) {
        return Err(CredentialFileError::Exposed {
            path: shown(),
            who,
            mode,
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_CREDENTIAL_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CREDENTIAL_BYTES {
        return Err(CredentialFileError::TooLarge {
            path: shown(),
            limit: MAX_CREDENTIAL_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|_| CredentialFileError::NotText { path: shown() })
}

/// Writes `text` to `path` as a credential file, whole or not at all: to
/// a new file of a random name beside it (created 0600, never through a
/// link someone planted), then renamed over `path`. A reader sees the old
/// text or the new, never an empty or half-written file; a link at `path`
/// itself is replaced, not followed.
pub fn write(path: &Path, text: &str) -> Result<(), CredentialFileError> {
    let write_error = |e: io::Error| CredentialFileError::Write {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| write_error(io::Error::other(e.to_string())))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.{}.new", hex::encode(nonce)));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(FILE_MODE)
            .open(&temporary)?;
        // The mode asked for is narrowed by the umask, never widened.
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(write_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o777
    }

    #[test]
    fn a_file_of_this_users_alone_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        write(&p, "user@pve!t=secret\n").unwrap();
        assert_eq!(mode(&p), 0o600);
        assert_eq!(read(&p).unwrap(), "user@pve!t=secret\n");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(read(&p).unwrap(), "user@pve!t=secret\n");
        // Through a link, the file it names is checked.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert_eq!(read(&link).unwrap(), "user@pve!t=secret\n");
    }

    #[test]
    fn a_file_others_can_open_is_refused_without_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "user@pve!t=hunter2").unwrap();
        for (m, who) in [
            (0o644, "its group and every user"),
            (0o640, "its group"),
            (0o604, "every user"),
            (0o620, "its group"),
        ] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
            let e = read(&p).unwrap_err();
            assert!(matches!(e, CredentialFileError::Exposed { .. }), "{e}");
            let text = e.to_string();
            assert!(text.contains(who), "{text}");
            assert!(
                text.contains(&format!("chmod 600 {}", p.display())),
                "{text}"
            );
            assert!(!text.contains("hunter2"), "{text}");
        }
        // Writing it replaces it with a 0600 file.
        write(&p, "new").unwrap();
        assert_eq!(mode(&p), 0o600);
        assert_eq!(read(&p).unwrap(), "new");
    }

    #[test]
    fn a_directory_a_huge_file_and_a_missing_one_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read(dir.path()).unwrap_err(),
            CredentialFileError::NotAFile { .. }
        ));
        let big = dir.path().join("big");
        write(&big, &"x".repeat(MAX_CREDENTIAL_BYTES as usize + 1)).unwrap();
        assert!(matches!(
            read(&big).unwrap_err(),
            CredentialFileError::TooLarge { .. }
        ));
        let e = read(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().starts_with("cannot read "), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(
            read(&fifo).unwrap_err(),
            CredentialFileError::NotAFile { .. }
        ));
    }

    /// A link planted where the file goes is replaced, and the file it
    /// pointed to is left alone.
    #[test]
    fn writing_never_goes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("audit.jsonl");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("clients.toml");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(read(&path).unwrap(), "new");
        // Nothing is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    /// A directory others can write lets them swap the file (or a link
    /// to it) for one of their own: refused; a sticky one (/tmp) is not.
    #[test]
    fn a_file_in_a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        let p = open.join("token");
        write(&p, "x").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = read(&p).unwrap_err();
        assert!(
            matches!(e, CredentialFileError::OpenDirectory { .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains(&format!("chmod go-w {}", open.display())),
            "{e}"
        );
        // Through a link in a private directory: the target's is checked.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(matches!(
            read(&link).unwrap_err(),
            CredentialFileError::OpenDirectory { .. }
        ));
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(read(&p).unwrap(), "x");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(read(&link).unwrap(), "x");
    }

    /// Ownership: only where the test can make a file another user's.
    #[test]
    fn a_file_of_another_user_is_refused() {
        if effective_uid() != 0 {
            eprintln!("SKIPPED: needs root to give a file away");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        write(&p, "x").unwrap();
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        let e = read(&p).unwrap_err();
        assert_eq!(
            e,
            CredentialFileError::NotOwned {
                path: p.display().to_string(),
                owner: 65534,
                me: 0
            }
        );
        assert!(e.to_string().contains("chown 0 "), "{e}");
    }
}
