//! One audit chain for the whole deployment. Any replica appends: the
//! append takes a transaction-scoped advisory lock, reads the head, seals
//! the next line and inserts it, so concurrent appends queue instead of
//! forking the chain, and `seq` being the primary key makes a duplicate
//! impossible even without the lock. A replica that dies mid-append
//! leaves nothing: its transaction rolls back with its connection.

use std::{io::Write, sync::Arc};

use serde_json::{Map, Value};

use super::{connection, unavailable, PgError, Postgres, LOCK_AUDIT, LOCK_CLASS};
use crate::audit::{seal, AuditError, AuditStore, Head, Verdict, Verifier, GENESIS};

/// Lines read per round trip by `verify` and `export`.
const PAGE: i64 = 2000;

pub struct PgAudit {
    db: Arc<Postgres>,
}

impl PgAudit {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }

    /// Lines after `after`, in order, at most [`PAGE`] of them.
    fn page(&self, after: i64) -> Result<Vec<(i64, String)>, AuditError> {
        self.db
            .run("reading the audit chain", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let rows = conn
                    .query(
                        "SELECT seq, line FROM airlock_audit WHERE seq > $1 ORDER BY seq LIMIT $2",
                        &[&after, &PAGE],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            })
    }

    /// Every line in order, page by page, until `each` says stop.
    fn each_line(
        &self,
        mut each: impl FnMut(&str) -> Result<bool, AuditError>,
    ) -> Result<(), AuditError> {
        let mut after = 0i64;
        loop {
            let page = self.page(after)?;
            let Some(last) = page.last().map(|(seq, _)| *seq) else {
                return Ok(());
            };
            for (_, line) in &page {
                if !each(line)? {
                    return Ok(());
                }
            }
            after = last;
        }
    }
}

impl AuditStore for PgAudit {
    fn append(&self, event: &str, fields: Map<String, Value>) -> Result<Head, AuditError> {
        let event = event.to_string();
        self.db
            .run("appending to the audit chain", move |pool, at| async move {
                let e = |e: tokio_postgres::Error| AuditError::from(unavailable(&at, e));
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                tx.execute(
                    "SELECT pg_advisory_xact_lock($1, $2)",
                    &[&LOCK_CLASS, &LOCK_AUDIT],
                )
                .await
                .map_err(e)?;
                let head = tx
                    .query_opt(
                        "SELECT seq, hash FROM airlock_audit ORDER BY seq DESC LIMIT 1",
                        &[],
                    )
                    .await
                    .map_err(e)?
                    .map(|r| Head {
                        seq: r.get::<_, i64>(0) as u64,
                        hash: r.get(1),
                    })
                    .unwrap_or(Head {
                        seq: 0,
                        hash: GENESIS.into(),
                    });
                let (next, mut line) = seal(&head, &event, fields)?;
                line.pop(); // the newline: a row is one line
                let text = String::from_utf8(line).expect("serde_json writes UTF-8");
                tx.execute(
                    "INSERT INTO airlock_audit (seq, hash, line) VALUES ($1, $2, $3)",
                    &[&(next.seq as i64), &next.hash, &text],
                )
                .await
                .map_err(e)?;
                tx.commit().await.map_err(e)?;
                Ok(next)
            })
    }

    fn verify(&self) -> Result<Verdict, AuditError> {
        let mut verifier = Verifier::default();
        self.each_line(|line| {
            let mut bytes = Vec::with_capacity(line.len() + 1);
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
            Ok(verifier.line(&bytes))
        })?;
        Ok(verifier.verdict())
    }

    fn export(&self, out: &mut dyn Write) -> Result<u64, AuditError> {
        let mut written = 0u64;
        self.each_line(|line| {
            out.write_all(line.as_bytes())
                .and_then(|_| out.write_all(b"\n"))
                .map_err(|e| AuditError::Write {
                    path: "the export".into(),
                    message: e.to_string(),
                })?;
            written += line.len() as u64 + 1;
            Ok(true)
        })?;
        out.flush().map_err(|e| AuditError::Write {
            path: "the export".into(),
            message: e.to_string(),
        })?;
        Ok(written)
    }

    fn location(&self) -> String {
        self.db.at().to_string()
    }
}

impl From<PgError> for AuditError {
    fn from(e: PgError) -> Self {
        match e {
            PgError::Unavailable { at, message } => AuditError::Store {
                location: at,
                message,
            },
            PgError::TimedOut { ref at, .. } => AuditError::Store {
                location: at.clone(),
                message: e.to_string(),
            },
            other => AuditError::Store {
                location: "PostgreSQL".into(),
                message: other.to_string(),
            },
        }
    }
}
