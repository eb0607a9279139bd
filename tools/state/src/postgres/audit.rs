//! One audit chain for the whole deployment. Any replica appends: it seals
//! the line that follows the head it knows and inserts it at that `seq`,
//! the table's primary key. If another replica got there first, the
//! insert does nothing; the writer reads the real head and seals again.
//! So two lines can never share a `seq` (no fork, no duplicate), and a
//! line only ever follows the row before it (no gap). One statement per
//! append when this replica wrote the last line, two more per lost race.
//! A replica that dies mid-append leaves nothing: an insert is atomic.

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use serde_json::{Map, Value};

use super::{connection, unavailable, PgError, Postgres};
use airlock_gateway::audit::{seal, AuditError, AuditStore, Head, Verdict, Verifier, GENESIS};

/// Lines read per round trip by `verify` and `export`.
const PAGE: i64 = 2000;

/// Appends that lose this many races in a row give up (the call is
/// refused): only a storm of other writers could cause it.
const MAX_ATTEMPTS: u32 = 1000;

pub struct PgAudit {
    db: Arc<Postgres>,
    /// The head after this process's last append, when it succeeded.
    head: Mutex<Option<Head>>,
}

impl PgAudit {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self {
            db,
            head: Mutex::new(None),
        }
    }

    /// Lines after `after`, in order, at most [`PAGE`] of them.
    fn page(&self, after: i64) -> Result<Vec<(i64, String)>, AuditError> {
        self.db
            .run("reading the audit chain", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let page = conn
                    .prepare_cached(
                        "SELECT seq, line FROM airlock_audit WHERE seq > $1 ORDER BY seq LIMIT $2",
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                let rows = conn
                    .query(&page, &[&after, &PAGE])
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
    fn reachable(&self) -> Result<(), AuditError> {
        self.db.run(
            "asking whether the database answers",
            |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.simple_query("SELECT 1")
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok(())
            },
        )
    }

    fn append(&self, event: &str, fields: Map<String, Value>) -> Result<Head, AuditError> {
        let event = event.to_string();
        let known = self.head.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let appended = self
            .db
            .run("appending to the audit chain", move |pool, at| async move {
                let e = |e: tokio_postgres::Error| AuditError::from(unavailable(&at, e));
                let conn = connection(&pool, &at).await?;
                let insert = conn
                    .prepare_cached(
                        "INSERT INTO airlock_audit (seq, hash, line) VALUES ($1, $2, $3) \
                         ON CONFLICT (seq) DO NOTHING",
                    )
                    .await
                    .map_err(e)?;
                let last = conn
                    .prepare_cached("SELECT seq, hash FROM airlock_audit ORDER BY seq DESC LIMIT 1")
                    .await
                    .map_err(e)?;
                let read_head = || async {
                    Ok::<_, AuditError>(
                        conn.query_opt(&last, &[])
                            .await
                            .map_err(e)?
                            .map(|r| Head {
                                seq: r.get::<_, i64>(0) as u64,
                                hash: r.get(1),
                            })
                            .unwrap_or(Head {
                                seq: 0,
                                hash: GENESIS.into(),
                            }),
                    )
                };
                let mut head = match known {
                    Some(h) => h,
                    None => read_head().await?,
                };
                for _ in 0..MAX_ATTEMPTS {
                    let (next, mut line) = seal(&head, &event, fields.clone())?;
                    line.pop(); // the newline: a row is one line
                    let text = String::from_utf8(line).expect("serde_json writes UTF-8");
                    let inserted = conn
                        .execute(&insert, &[&(next.seq as i64), &next.hash, &text])
                        .await
                        .map_err(e)?;
                    if inserted == 1 {
                        return Ok(next);
                    }
                    // Another replica wrote this seq: continue after it.
                    head = read_head().await?;
                }
                Err(AuditError::Store {
                    location: at.clone(),
                    message: format!(
                        "{MAX_ATTEMPTS} other appends won the race for the next line in a row; the call is refused"
                    ),
                })
            });
        *self.head.lock().unwrap_or_else(|p| p.into_inner()) = appended.as_ref().ok().cloned();
        appended
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
            PgError::TimedOut { ref at, .. } => AuditError::Unsettled {
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
