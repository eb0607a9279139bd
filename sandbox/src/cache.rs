//! The compiled guest, cached on disk so that only the first start on a
//! machine pays for Cranelift.
//!
//! The key covers everything that makes compiled code incompatible: the
//! guest's SHA-256, the wasmtime version, the engine's own compatibility
//! hash (target, tunables, enabled features), and Airlock's knobs (fuel,
//! snapshot). Files are written to a temporary name and renamed, so a
//! crashed or concurrent writer never leaves a half file under the final
//! name; an exclusive file lock makes concurrent first starts compile once.

use std::{
    fs::{self, File},
    hash::{Hash, Hasher},
    io::Write,
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

/// Where compiled modules live unless configured: `$AIRLOCK_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/airlock`, else `~/.cache/airlock`, else a folder in the
/// system temp dir.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AIRLOCK_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("airlock");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h).join(".cache/airlock");
    }
    std::env::temp_dir().join("airlock-cache")
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

impl Lock {
    pub fn acquire(dir: &Path) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))?;
        f.lock()?;
        Ok(Self(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Writes `bytes` to `path` atomically (temp file, fsync, rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("module"),
        std::process::id()
    ));
    let mut f = File::create(&tmp)?;
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
