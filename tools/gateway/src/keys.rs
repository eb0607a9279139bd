//! Bearer keys for HTTP clients: which key acts as which identity. Only a
//! key's SHA-256 is stored; the key is shown once, when it is issued
//! (`airlock enroll`). One machine keeps them in an enrollment file
//! (re-read on SIGHUP); a deployment in its PostgreSQL database, where
//! every replica sees a new key within [`SHARED_REFRESH`]. Both stores
//! live in `airlock-state`.

use std::time::Duration;

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
    Checked(#[from] airlock_edge::credential_file::CredentialFileError),
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

/// What a key is for. The use is written into the key itself (its
/// prefix, part of what is hashed), so no holder can change it: an
/// agent's key never signs a person into the console, and a console key
/// never calls a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyUse {
    /// An MCP client's: `alk_…`.
    Agent,
    /// A person's, for the operator console only: `alc_…`.
    Console,
}

impl KeyUse {
    pub fn prefix(self) -> &'static str {
        match self {
            KeyUse::Agent => "alk_",
            KeyUse::Console => "alc_",
        }
    }

    /// The use a presented key claims by its prefix (checked again by its
    /// hash: a changed prefix is another key).
    pub fn of(key: &str) -> Option<KeyUse> {
        [KeyUse::Agent, KeyUse::Console]
            .into_iter()
            .find(|u| key.starts_with(u.prefix()))
    }
}

/// Issues a fresh key for `identity` into `store`; returns the key, which
/// is stored nowhere.
pub fn enroll(store: &dyn KeyStore, identity: &str) -> Result<String, KeyError> {
    enroll_for(store, identity, KeyUse::Agent)
}

/// [`enroll`], for `use_`.
pub fn enroll_for(store: &dyn KeyStore, identity: &str, use_: KeyUse) -> Result<String, KeyError> {
    check_identity(identity)?;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| KeyError::Store {
        location: store.location(),
        message: format!("no randomness for a key: {e}"),
    })?;
    let key = format!("{}{}", use_.prefix(), hex::encode(bytes));
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
