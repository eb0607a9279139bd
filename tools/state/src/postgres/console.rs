//! Sign-ins to the operator console every replica can check: a person
//! signed in on one replica decides on whichever the load balancer sends
//! them to. Kept by the SHA-256 of the cookie's id, never the id;
//! expired rows go as new ones come, and the table never holds more than
//! [`MAX_CONSOLE_SESSIONS`].

use std::sync::Arc;

use super::{connection, epoch_ms, unavailable, PgError, Postgres};
use airlock_gateway::state::{
    ConsoleSessions, SessionError, MAX_CONSOLE_RECORD_BYTES, MAX_CONSOLE_SESSIONS,
    MAX_CONSOLE_SESSIONS_PER_IDENTITY,
};

pub struct PgConsoleSessions {
    db: Arc<Postgres>,
}

impl PgConsoleSessions {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }
}

impl ConsoleSessions for PgConsoleSessions {
    fn put(
        &self,
        id_sha256: &[u8; 32],
        identity: &str,
        record: &str,
        expires_ms: i64,
    ) -> Result<(), SessionError> {
        if record.len() > MAX_CONSOLE_RECORD_BYTES {
            return Err(SessionError(format!(
                "a console sign-in of {} bytes is over the {MAX_CONSOLE_RECORD_BYTES} kept",
                record.len()
            )));
        }
        let (key, record, now) = (hex::encode(id_sha256), record.to_string(), epoch_ms());
        let identity = identity.to_string();
        self.db
            .run::<_, PgError, _, _>("storing a console sign-in", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let e = |e| unavailable(&at, e);
                conn.execute(
                    "DELETE FROM airlock_console_sessions WHERE expires_ms <= $1 OR id_sha256 IN \
                     (SELECT id_sha256 FROM airlock_console_sessions \
                      ORDER BY expires_ms DESC OFFSET $2)",
                    &[&now, &(MAX_CONSOLE_SESSIONS - 1)],
                )
                .await
                .map_err(e)?;
                conn.execute(
                    "DELETE FROM airlock_console_sessions WHERE identity = $1 AND id_sha256 IN \
                     (SELECT id_sha256 FROM airlock_console_sessions WHERE identity = $1 \
                      ORDER BY expires_ms DESC OFFSET $2)",
                    &[&identity, &(MAX_CONSOLE_SESSIONS_PER_IDENTITY - 1)],
                )
                .await
                .map_err(e)?;
                conn.execute(
                    "INSERT INTO airlock_console_sessions (id_sha256, identity, record, expires_ms) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (id_sha256) DO UPDATE \
                     SET record = EXCLUDED.record, expires_ms = EXCLUDED.expires_ms",
                    &[&key, &identity, &record, &expires_ms],
                )
                .await
                .map_err(e)?;
                Ok(())
            })
            .map_err(SessionError::from)
    }

    fn get(&self, id_sha256: &[u8; 32], now_ms: i64) -> Result<Option<String>, SessionError> {
        let key = hex::encode(id_sha256);
        self.db
            .run::<_, PgError, _, _>("reading a console sign-in", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let row = conn
                    .query_opt(
                        "SELECT record FROM airlock_console_sessions \
                         WHERE id_sha256 = $1 AND expires_ms > $2",
                        &[&key, &now_ms],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok(row.map(|r| r.get::<_, String>(0)))
            })
            .map_err(SessionError::from)
    }

    fn delete(&self, id_sha256: &[u8; 32]) -> Result<(), SessionError> {
        let key = hex::encode(id_sha256);
        self.db
            .run::<_, PgError, _, _>("ending a console sign-in", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute(
                    "DELETE FROM airlock_console_sessions WHERE id_sha256 = $1",
                    &[&key],
                )
                .await
                .map_err(|e| unavailable(&at, e))?;
                Ok(())
            })
            .map_err(SessionError::from)
    }
}
