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
