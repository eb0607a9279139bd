//! Records a transport keeps so that any replica can pick up a client's
//! session (for MCP: the `initialize` parameters, replayed on the replica
//! a session's request lands on when it is not the one that opened it).
//! Opaque text here; bounded in size and in age.

use std::sync::Arc;

use super::{connection, unavailable, PgError, Postgres};
use crate::state::{SessionError, SessionRecords, MAX_SESSION_ID_BYTES, MAX_SESSION_RECORD_BYTES};

/// Records not stored again for this long are deleted.
const KEEP_MS: i64 = 24 * 60 * 60 * 1000;

impl From<PgError> for SessionError {
    fn from(e: PgError) -> Self {
        SessionError(e.to_string())
    }
}

pub struct PgSessions {
    db: Arc<Postgres>,
}

impl PgSessions {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl SessionRecords for PgSessions {
    fn put(&self, id: &str, record: &str) -> Result<(), SessionError> {
        if id.len() > MAX_SESSION_ID_BYTES || record.len() > MAX_SESSION_RECORD_BYTES {
            return Err(SessionError(format!(
                "a session record of {} bytes (id {} bytes) is over the {MAX_SESSION_RECORD_BYTES} (id {MAX_SESSION_ID_BYTES}) kept",
                record.len(),
                id.len()
            )));
        }
        let (id, record, now) = (id.to_string(), record.to_string(), now_ms());
        self.db.run("storing a session", move |pool, at| async move {
            let conn = connection(&pool, &at).await?;
            let e = |e| unavailable(&at, e);
            conn.execute(
                "INSERT INTO airlock_sessions (id, record, stored_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, stored_ms = EXCLUDED.stored_ms",
                &[&id, &record, &now],
            )
            .await
            .map_err(e)?;
            // Old ones go as new ones come: the table holds a day's sessions.
            conn.execute(
                "DELETE FROM airlock_sessions WHERE stored_ms < $1",
                &[&(now - KEEP_MS)],
            )
            .await
            .map_err(e)?;
            Ok::<_, PgError>(())
        })?;
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<String>, SessionError> {
        if id.len() > MAX_SESSION_ID_BYTES {
            return Ok(None);
        }
        let (id, oldest) = (id.to_string(), now_ms() - KEEP_MS);
        Ok(self
            .db
            .run("reading a session", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let row = conn
                    .query_opt(
                        "SELECT record FROM airlock_sessions WHERE id = $1 AND stored_ms >= $2",
                        &[&id, &oldest],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok::<_, PgError>(row.map(|r| r.get(0)))
            })?)
    }

    fn delete(&self, id: &str) -> Result<(), SessionError> {
        if id.len() > MAX_SESSION_ID_BYTES {
            return Ok(());
        }
        let id = id.to_string();
        self.db
            .run("deleting a session", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute("DELETE FROM airlock_sessions WHERE id = $1", &[&id])
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok::<_, PgError>(())
            })?;
        Ok(())
    }
}
