//! Bearer keys every replica accepts: `airlock enroll` inserts a key's
//! hash, and each replica re-reads the table every
//! [`SHARED_REFRESH`](airlock_gateway::keys::SHARED_REFRESH).

use std::{sync::Arc, time::Duration};

use super::{connection, unavailable, PgError, Postgres};
use airlock_gateway::keys::{
    check_identity, parse_hash, KeyError, KeyHash, KeyStore, SHARED_REFRESH,
};

impl From<PgError> for KeyError {
    fn from(e: PgError) -> Self {
        KeyError::Store {
            location: "PostgreSQL".into(),
            message: e.to_string(),
        }
    }
}

pub struct PgKeys {
    db: Arc<Postgres>,
}

impl PgKeys {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }
}

impl KeyStore for PgKeys {
    fn add(&self, identity: &str, key_sha256: &KeyHash) -> Result<(), KeyError> {
        check_identity(identity)?;
        let (identity, hash) = (identity.to_string(), hex::encode(key_sha256));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        self.db.run("adding a key", move |pool, at| async move {
            let conn = connection(&pool, &at).await?;
            conn.execute(
                "INSERT INTO airlock_keys (key_sha256, identity, created_ms) VALUES ($1, $2, $3)",
                &[&hash, &identity, &now_ms],
            )
            .await
            .map_err(|e| unavailable(&at, e))?;
            Ok(())
        })
    }

    fn all(&self) -> Result<Vec<(KeyHash, String)>, KeyError> {
        let rows: Vec<(String, String)> =
            self.db.run("reading keys", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let rows = conn
                    .query("SELECT key_sha256, identity FROM airlock_keys", &[])
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok::<_, PgError>(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            })?;
        // A row that is not a hash (written by hand) is skipped, not
        // fatal: the other clients keep working.
        Ok(rows
            .into_iter()
            .filter_map(|(h, identity)| parse_hash(&h).map(|h| (h, identity)))
            .collect())
    }

    fn revoke(&self, identity: &str) -> Result<usize, KeyError> {
        let identity = identity.to_string();
        let n = self.db.run("revoking keys", move |pool, at| async move {
            let conn = connection(&pool, &at).await?;
            conn.execute("DELETE FROM airlock_keys WHERE identity = $1", &[&identity])
                .await
                .map_err(|e| unavailable(&at, e))
        })?;
        Ok(n as usize)
    }

    fn location(&self) -> String {
        self.db.at().to_string()
    }

    fn refresh_every(&self) -> Option<Duration> {
        Some(SHARED_REFRESH)
    }
}
