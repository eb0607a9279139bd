//! Bearer keys for HTTP clients: which key acts as which identity. Only a
//! key's SHA-256 is stored; the key is shown once, when it is issued
//! (`airlock enroll`). One machine keeps them in an enrollment file
//! ([`EnrollmentFile`], re-read on SIGHUP); a deployment in its
//! PostgreSQL database (`state::postgres::keys`), where every replica
//! sees a new key within [`SHARED_REFRESH`].

use crate::credential_file;
use std::{path::Path, path::PathBuf, time::Duration};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A key's SHA-256.
pub type KeyHash = [u8; 32];

/// How often a server re-reads keys kept in a shared database.
pub const SHARED_REFRESH: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("identity `{0}` may only use letters, digits, - _ . @")]
    BadIdentity(String),
    #[error("enrollment file {path}: {message}")]
    File { path: String, message: String },
    /// Not this user's alone, or not readable: whoever can write the
    /// file could enroll a key of their own.
    #[error("enrollment file: {0}")]
    Checked(#[from] crate::credential_file::CredentialFileError),
    #[error("the key store {location} is unavailable: {message}")]
    Store { location: String, message: String },
}

/// Where keys are kept.
pub trait KeyStore: Send + Sync {
    /// Records a key (by its hash) for `identity`.
    fn add(&self, identity: &str, key_sha256: &KeyHash) -> Result<(), KeyError>;

    /// Every key and its identity.
    fn all(&self) -> Result<Vec<(KeyHash, String)>, KeyError>;

    /// Removes every key of `identity`; returns how many there were.
    fn revoke(&self, identity: &str) -> Result<usize, KeyError>;

    /// Where, for messages (never a password).
    fn location(&self) -> String;

    /// How often a server should re-read the keys, when others may add
    /// some (`None`: at start and on SIGHUP only).
    fn refresh_every(&self) -> Option<Duration> {
        None
    }
}

/// Issues a fresh key for `identity` into `store`; returns the key, which
/// is stored nowhere.
pub fn enroll(store: &dyn KeyStore, identity: &str) -> Result<String, KeyError> {
    check_identity(identity)?;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| KeyError::Store {
        location: store.location(),
        message: format!("no randomness for a key: {e}"),
    })?;
    let key = format!("alk_{}", hex::encode(bytes));
    store.add(identity, &hash(&key))?;
    Ok(key)
}

/// The hash a key is stored and looked up by.
pub fn hash(key: &str) -> KeyHash {
    Sha256::digest(key.as_bytes()).into()
}

/// Identities that can be written into a TOML file or a log line as they
/// are.
pub fn check_identity(identity: &str) -> Result<(), KeyError> {
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@');
    if identity.is_empty() || !identity.chars().all(fine) {
        return Err(KeyError::BadIdentity(identity.to_string()));
    }
    Ok(())
}

/// A 64-digit hex hash, as files and databases keep it.
pub fn parse_hash(text: &str) -> Option<KeyHash> {
    hex::decode(text)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
}

/// One machine's keys: a TOML file of `[[client]]` entries
/// (`identity`, `key_sha256`).
pub struct EnrollmentFile {
    path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Client {
    identity: String,
    key_sha256: String,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Enrollment {
    #[serde(default)]
    client: Vec<Client>,
}

impl EnrollmentFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, message: impl std::fmt::Display) -> KeyError {
        KeyError::File {
            path: self.path.display().to_string(),
            message: message.to_string(),
        }
    }
}

impl KeyStore for EnrollmentFile {
    fn add(&self, identity: &str, key_sha256: &KeyHash) -> Result<(), KeyError> {
        check_identity(identity)?;
        let mut text = if self.path.exists() {
            credential_file::read(&self.path)?
        } else {
            String::new()
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "\n[[client]]\nidentity = \"{identity}\"\nkey_sha256 = \"{}\"\n",
            hex::encode(key_sha256)
        ));
        // A first key may name a directory that does not exist yet: made
        // as the state directory is (0700, this user's).
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                crate::private_files::private_dir(dir).map_err(|e| self.error(e))?;
            }
        }
        Ok(credential_file::write(&self.path, &text)?)
    }

    fn all(&self) -> Result<Vec<(KeyHash, String)>, KeyError> {
        let text = credential_file::read(&self.path)?;
        let e: Enrollment = toml::from_str(&text).map_err(|e| self.error(e))?;
        e.client
            .into_iter()
            .map(|c| {
                let hash = parse_hash(&c.key_sha256).ok_or_else(|| {
                    self.error(format!("key_sha256 of {} is not 64 hex digits", c.identity))
                })?;
                Ok((hash, c.identity))
            })
            .collect()
    }

    fn revoke(&self, identity: &str) -> Result<usize, KeyError> {
        let kept: Vec<(KeyHash, String)> = self.all()?;
        let before = kept.len();
        let kept: Vec<_> = kept.into_iter().filter(|(_, i)| i != identity).collect();
        let removed = before - kept.len();
        if removed == 0 {
            return Ok(0);
        }
        let mut text = String::from("# Enrolled HTTP clients (airlock enroll); only key hashes.\n");
        for (hash, identity) in &kept {
            text.push_str(&format!(
                "\n[[client]]\nidentity = \"{identity}\"\nkey_sha256 = \"{}\"\n",
                hex::encode(hash)
            ));
        }
        // Written whole and renamed into place: a server re-reading it
        // sees the old keys or the new, never half.
        credential_file::write(&self.path, &text)?;
        Ok(removed)
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}
