//! The compiled guest, cached on disk so that only the first start on a
//! machine pays for Cranelift.
//!
//! The key covers everything that makes compiled code incompatible: the
//! guest's SHA-256, the wasmtime version, the engine's own compatibility
//! hash (target, tunables, enabled features), and Airlock's knobs (fuel,
//! snapshot). Files are written to a temporary name and renamed, so a
//! crashed or concurrent writer never leaves a half file under the final
//! name; an exclusive file lock makes concurrent first starts compile once.
//!
//! A cached module is native code the process will run, so it is trusted
//! only as far as the directory is: the directory must be the user's own
//! and writable by no one else (created 0700, never a shared `/tmp`
//! fallback), the module and its recorded SHA-256 must be the user's own
//! regular files, and the module's bytes must match the recorded digest.
//! Anything else is compiled again rather than loaded.

use std::{
    fs::{self, File},
    hash::{Hash, Hasher},
    io::Write,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};

/// Where compiled modules live unless configured: `$AIRLOCK_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/airlock`, else `~/.cache/airlock`. There is no fallback
/// to the system temp dir: another user could prepare a directory there.
pub fn default_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = var("AIRLOCK_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("airlock"));
    }
    var("HOME").map(|h| PathBuf::from(h).join(".cache/airlock"))
}

/// Creates `dir` (0700) if needed and checks that only this user can write
/// to it: owned by the effective user, not a symlink, not writable by group
/// or others.
pub fn prepare_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    let refuse = |why: String| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        ))
    };
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return refuse(format!(
            "{} is not a directory (a symlink?); point AIRLOCK_CACHE_DIR at a directory of your own",
            dir.display()
        ));
    }
    if meta.uid() != euid() {
        return refuse(format!(
            "{} belongs to uid {}, not to this user ({}); compiled code is loaded only from a directory of your own: run the command as its owner (for the Debian package's /var/cache/airlock: sudo -u airlock airlock ...), or point AIRLOCK_CACHE_DIR (--cache-dir) at a directory of your own",
            dir.display(),
            meta.uid(),
            euid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "{} is writable by group or others (mode {:o}); run `chmod 700 {}`",
            dir.display(),
            meta.mode() & 0o777,
            dir.display()
        ));
    }
    Ok(())
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `meta` (taken without following a symlink) is of a regular file
/// of this user's that no one else can write.
fn owned_file(meta: &fs::Metadata) -> bool {
    meta.file_type().is_file() && meta.uid() == euid() && meta.mode() & 0o022 == 0
}

/// Where a module's SHA-256 is recorded.
fn digest_path(module: &Path) -> PathBuf {
    module.with_extension("cwasm.sha256")
}

/// What the digest file records: the module's SHA-256, and the identity of
/// the file it was checked against (device, inode, size, change time). A
/// file whose identity is unchanged has not been written since it was
/// hashed — its change time is set by the kernel on every write and no
/// one but root can set it back — so a start only re-hashes a module that
/// changed, moved or was copied (21 MB: about 20 ms on 2 cores).
#[derive(Debug, PartialEq, Eq)]
struct Record {
    sha256: String,
    identity: [i64; 5],
}

impl Record {
    fn identity(meta: &fs::Metadata) -> [i64; 5] {
        [
            meta.dev() as i64,
            meta.ino() as i64,
            meta.size() as i64,
            meta.ctime(),
            meta.ctime_nsec(),
        ]
    }

    fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        let sha256 = words.next()?.to_string();
        let mut identity = [0i64; 5];
        for slot in &mut identity {
            *slot = words.next()?.parse().ok()?;
        }
        Some(Self { sha256, identity })
    }

    fn text(&self) -> String {
        let ids: Vec<String> = self.identity.iter().map(i64::to_string).collect();
        format!("{} {}\n", self.sha256, ids.join(" "))
    }
}

/// Whether the module at `path` may be loaded: it and its digest record
/// are this user's own regular files, and either the module is the very
/// file last checked (same identity) or its bytes match the recorded
/// SHA-256 (then the record is refreshed). `false` means: compile again.
pub fn verified(path: &Path) -> bool {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return false; // not compiled yet
    };
    let digest = digest_path(path);
    let digest_owned = fs::symlink_metadata(&digest).is_ok_and(|m| owned_file(&m));
    if !owned_file(&meta) || !digest_owned {
        tracing::warn!(path = %path.display(), "ignoring a compiled module that is not this user's own file, or has no recorded digest; compiling again");
        return false;
    }
    let Some(record) = fs::read_to_string(&digest)
        .ok()
        .and_then(|t| Record::parse(&t))
    else {
        return false;
    };
    if Record::identity(&meta) == record.identity {
        return true;
    }
    let Ok(bytes) = fs::read(path) else {
        return false;
    };
    if hex::encode(Sha256::digest(&bytes)) != record.sha256 {
        tracing::warn!(path = %path.display(), "ignoring a compiled module whose bytes differ from its recorded digest; compiling again");
        return false;
    }
    // Same bytes in a new file (a copied or restored cache): remember it.
    let _ = record_digest(path, record.sha256);
    true
}

/// Writes the digest record of the module now at `path`.
fn record_digest(path: &Path, sha256: String) -> std::io::Result<()> {
    let identity = Record::identity(&fs::symlink_metadata(path)?);
    write_atomic(
        &digest_path(path),
        Record { sha256, identity }.text().as_bytes(),
    )
}

/// The file name for a compiled module.
pub fn key(guest_sha256: &str, engine: &wasmtime::Engine, knobs: &str) -> String {
    let mut compat = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    let mut h = Sha256::new();
    h.update(guest_sha256.as_bytes());
    h.update(b"\0wasmtime-48.0.8\0");
    h.update(compat.finish().to_le_bytes());
    h.update(knobs.as_bytes());
    format!("guest-{}.cwasm", &hex::encode(h.finalize())[..32])
}

/// Holds the directory's lock file while it lives.
pub struct Lock(File);

/// How long a start waits for another process's compile (7-10 s on 2
/// cores) before it gives up.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);

impl Lock {
    /// Takes the directory's lock, waiting at most [`LOCK_WAIT`].
    pub fn acquire(dir: &Path) -> std::io::Result<Self> {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(".lock"))?;
        let t0 = Instant::now();
        loop {
            match f.try_lock() {
                Ok(()) => return Ok(Self(f)),
                Err(fs::TryLockError::WouldBlock) if t0.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "another process has held the cache lock for more than {} s",
                            LOCK_WAIT.as_secs()
                        ),
                    ))
                }
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Writes a compiled module and then its digest, each atomically; a
/// module without its digest is never loaded.
pub fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, bytes)?;
    record_digest(path, hex::encode(Sha256::digest(bytes)))
}

/// Writes `bytes` to `path` atomically (temp file, 0600, fsync, rename).
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("module"),
        std::process::id()
    ));
    let mut f = File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)
}

/// Compiled modules kept in the directory; older ones (earlier guests, other
/// knobs) are removed after a compile. Four covers fuel on/off × snapshot
/// on/off for the current guest.
pub const KEEP: usize = 4;

/// Removes all but the [`KEEP`] most recently written modules. Deleting a
/// file another process has mapped is safe on Unix (the mapping stays).
pub fn prune(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut modules: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("guest-") && name.ends_with(".cwasm")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    modules.sort_by_key(|m| std::cmp::Reverse(m.0));
    for (_, path) in modules.into_iter().skip(KEEP) {
        if let Err(e) = fs::remove_file(&path) {
            tracing::debug!(path = %path.display(), error = %e, "could not remove an old compiled module");
        }
        let _ = fs::remove_file(digest_path(&path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o777
    }

    #[test]
    fn the_directory_and_files_are_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        prepare_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let module = dir.join("guest-x.cwasm");
        store(&module, b"compiled").unwrap();
        assert_eq!(mode(&module), 0o600);
        assert_eq!(mode(&digest_path(&module)), 0o600);
        assert!(verified(&module));
        drop(Lock::acquire(&dir).unwrap());
        assert_eq!(mode(&dir.join(".lock")), 0o600);
    }

    #[test]
    fn a_directory_others_can_write_or_a_symlink_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let open = root.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_dir(&open).unwrap_err().to_string();
        assert!(
            e.contains("writable by group or others") && e.contains("chmod 700"),
            "{e}"
        );
        let link = root.path().join("link");
        let mine = root.path().join("mine");
        prepare_dir(&mine).unwrap();
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        let e = prepare_dir(&link).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        if euid() == 0 {
            // As root (CI), a directory handed to another user is refused.
            let theirs = root.path().join("theirs");
            prepare_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = prepare_dir(&theirs).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
    }

    #[test]
    fn a_module_is_loaded_only_if_it_matches_its_digest() {
        let dir = tempfile::tempdir().unwrap();
        let module = dir.path().join("guest-x.cwasm");
        // No digest: not loaded.
        fs::write(&module, b"planted").unwrap();
        assert!(!verified(&module));
        // Changed after it was stored: not loaded. (A same-size rewrite
        // within one tick of the file system's clock keeps the identity;
        // only this user can write here, so that is not an attack.)
        store(&module, b"compiled").unwrap();
        assert!(verified(&module));
        fs::write(&module, b"recompiled").unwrap();
        assert!(!verified(&module));
        // A digest record naming no file identity (an old format): not loaded.
        fs::write(
            digest_path(&module),
            hex::encode(Sha256::digest(b"recompiled")),
        )
        .unwrap();
        assert!(!verified(&module));
        // A symlink to a matching module: not loaded.
        let real = dir.path().join("real.cwasm");
        store(&real, b"compiled").unwrap();
        fs::remove_file(&module).unwrap();
        std::os::unix::fs::symlink(&real, &module).unwrap();
        fs::copy(digest_path(&real), digest_path(&module)).unwrap();
        assert!(!verified(&module));
        // Writable by others: not loaded.
        store(&real, b"compiled").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!verified(&real));
    }

    #[test]
    fn a_copied_module_is_hashed_once_and_then_known() {
        let dir = tempfile::tempdir().unwrap();
        let module = dir.path().join("guest-x.cwasm");
        store(&module, b"compiled").unwrap();
        let before = fs::read_to_string(digest_path(&module)).unwrap();
        // A new file with the same bytes (a restored cache): hashed, then
        // its new identity is recorded.
        fs::remove_file(&module).unwrap();
        fs::write(&module, b"compiled").unwrap();
        assert!(verified(&module));
        let after = fs::read_to_string(digest_path(&module)).unwrap();
        assert_ne!(before, after);
        assert_eq!(
            Record::parse(&after).unwrap().identity,
            Record::identity(&fs::metadata(&module).unwrap())
        );
        assert!(verified(&module));
    }

    #[test]
    fn prune_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..7 {
            let p = dir.path().join(format!("guest-{i}.cwasm"));
            fs::write(&p, b"x").unwrap();
            let t =
                std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + i);
            File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        fs::write(dir.path().join(".lock"), b"").unwrap();
        prune(dir.path());
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".lock",
                "guest-3.cwasm",
                "guest-4.cwasm",
                "guest-5.cwasm",
                "guest-6.cwasm"
            ]
        );
    }
}
