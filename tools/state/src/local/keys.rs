//! One machine's bearer keys: an enrollment file of `[[client]]` entries,
//! written whole and renamed into place, re-read by a server on SIGHUP.

use std::path::{Path, PathBuf};

use airlock_edge::{credential_file, private_files};
use airlock_gateway::keys::{check_identity, parse_hash, KeyError, KeyHash, KeyStore};
use serde::Deserialize;

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
        // as the state directory is (0700, this user's). One that exists
        // must not be another user's: root adding the first key to the
        // service's own directory would leave it a file it may not read.
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                private_files::private_dir(dir).map_err(|e| self.error(e))?;
            } else {
                private_files::not_another_users(dir).map_err(|e| self.error(e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_key_is_not_written_into_another_user_s_directory() {
        let root = tempfile::tempdir().unwrap();
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        // Only root can give a directory away to test with.
        if std::os::unix::fs::chown(&theirs, Some(65534), None).is_err() {
            return;
        }
        let file = EnrollmentFile::new(theirs.join("clients.toml"));
        let e = file.add("agent", &[7; 32]).unwrap_err();
        assert!(e.to_string().contains("belongs to uid 65534"), "{e}");
        assert!(!theirs.join("clients.toml").exists(), "nothing written");
        // A directory of this user's takes it.
        let mine = EnrollmentFile::new(root.path().join("clients.toml"));
        mine.add("agent", &[7; 32]).unwrap();
        assert_eq!(mine.all().unwrap().len(), 1);
    }
}
