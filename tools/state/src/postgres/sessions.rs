//! Records a transport keeps so that any replica can pick up a client's
//! session (for MCP: the `initialize` parameters, replayed on the replica
//! a session's request lands on when it is not the one that opened it).
//! Opaque text here; bounded in size and in age.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use super::{connection, epoch_ms, unavailable, PgError, Postgres};
use airlock_gateway::state::{
    SessionError, SessionRecords, MAX_SESSIONS_PER_IDENTITY, MAX_SESSION_ID_BYTES,
    MAX_SESSION_RECORDS, MAX_SESSION_RECORD_BYTES,
};

/// Every this many records stored by this process, the table is cut to
/// [`MAX_SESSION_RECORDS`].
const TRIM_EVERY: u64 = 100;

/// Records not stored again for this long are deleted.
const KEEP_MS: i64 = 24 * 60 * 60 * 1000;

impl From<PgError> for SessionError {
    fn from(e: PgError) -> Self {
        SessionError(e.to_string())
    }
}

pub struct PgSessions {
    db: Arc<Postgres>,
    stored: AtomicU64,
}

impl PgSessions {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self {
            db,
            stored: AtomicU64::new(0),
        }
    }
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
        let (id, record, now) = (id.to_string(), record.to_string(), epoch_ms());
        let trim = self
            .stored
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(TRIM_EVERY);
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
            // Old ones go as new ones come: the table holds a day's
            // sessions, and never more than MAX_SESSION_RECORDS.
            if trim {
                conn.execute(
                    "DELETE FROM airlock_sessions WHERE stored_ms < $1 OR id IN \
                     (SELECT id FROM airlock_sessions ORDER BY stored_ms DESC OFFSET $2)",
                    &[&(now - KEEP_MS), &MAX_SESSION_RECORDS],
                )
                .await
                .map_err(e)?;
            }
            Ok::<_, PgError>(())
        })?;
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<String>, SessionError> {
        if id.len() > MAX_SESSION_ID_BYTES {
            return Ok(None);
        }
        let (id, oldest) = (id.to_string(), epoch_ms() - KEEP_MS);
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

    fn bind(&self, id: &str, identity: &str) -> Result<(), SessionError> {
        if id.len() > MAX_SESSION_ID_BYTES {
            return Ok(());
        }
        let (id, identity) = (id.to_string(), identity.to_string());
        self.db
            .run("binding a session", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let bound = conn
                    .execute(
                        "UPDATE airlock_sessions SET identity = $2 WHERE id = $1 AND identity IS NULL",
                        &[&id, &identity],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                if bound > 0 {
                    conn.execute(
                        "DELETE FROM airlock_sessions WHERE id IN \
                         (SELECT id FROM airlock_sessions WHERE identity = $1 \
                          ORDER BY stored_ms DESC, id OFFSET $2)",
                        &[&identity, &(MAX_SESSIONS_PER_IDENTITY as i64)],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                }
                Ok::<_, PgError>(())
            })?;
        Ok(())
    }

    fn owner(&self, id: &str) -> Result<Option<String>, SessionError> {
        if id.len() > MAX_SESSION_ID_BYTES {
            return Ok(None);
        }
        let id = id.to_string();
        Ok(self
            .db
            .run("reading a session's owner", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let row = conn
                    .query_opt(
                        "SELECT identity FROM airlock_sessions WHERE id = $1",
                        &[&id],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok::<_, PgError>(row.and_then(|r| r.get(0)))
            })?)
    }
}
