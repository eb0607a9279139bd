//! Runbook versions every replica runs alike: one row per version, the
//! current one of a name the one added last. Adding and approving take a
//! per-name advisory lock, so two operators' steps never interleave.

use std::sync::Arc;

use super::{connection, lock_key, unavailable, PgError, Postgres, LOCK_CLASS};
use airlock_runbooks::runbook::{
    may_approve, pick_whole, version_of, RunbookStore, StoreError, Stored,
};

/// Runbook steps lock per name, in a class of their own.
const LOCK_CLASS_RUNBOOKS: i32 = LOCK_CLASS + 3;

impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        StoreError::Storage(e.to_string())
    }
}

const COLUMNS: &str = "name, version, text, author, added_ms, approved_by, approved_ms, retired_ms";

fn row(r: &tokio_postgres::Row) -> Stored {
    Stored {
        name: r.get(0),
        version: r.get(1),
        text: r.get(2),
        author: r.get(3),
        added_ms: r.get(4),
        approved_by: r.get(5),
        approved_ms: r.get(6),
        retired_ms: r.get(7),
    }
}

pub struct PgRunbooks {
    db: Arc<Postgres>,
}

impl PgRunbooks {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }
}

async fn versions_in(
    c: &impl deadpool_postgres::GenericClient,
    name: &str,
    at: &str,
) -> Result<Vec<Stored>, StoreError> {
    let rows = c
        .query(
            &format!("SELECT {COLUMNS} FROM airlock_runbooks WHERE name = $1 ORDER BY seq DESC"),
            &[&name],
        )
        .await
        .map_err(|e| unavailable(at, e))?;
    Ok(rows.iter().map(row).collect())
}

impl RunbookStore for PgRunbooks {
    fn add(
        &self,
        name: &str,
        text: &str,
        author: &str,
        now_ms: i64,
    ) -> Result<(Stored, bool), StoreError> {
        let (name, text, author) = (name.to_string(), text.to_string(), author.to_string());
        let version = version_of(&text);
        self.db.run("adding a runbook version", move |pool, at| async move {
            let e = |e| StoreError::from(unavailable(&at, e));
            let mut conn = connection(&pool, &at).await?;
            let tx = conn.transaction().await.map_err(e)?;
            lock_key(&tx, LOCK_CLASS_RUNBOOKS, &name).await.map_err(e)?;
            let known = tx
                .execute(
                    "UPDATE airlock_runbooks SET seq = nextval('airlock_runbooks_seq'), retired_ms = NULL, \
                     approved_by = CASE WHEN retired_ms IS NULL THEN approved_by END, \
                     approved_ms = CASE WHEN retired_ms IS NULL THEN approved_ms END \
                     WHERE name = $1 AND version = $2",
                    &[&name, &version],
                )
                .await
                .map_err(e)?
                > 0;
            if !known {
                tx.execute(
                    "INSERT INTO airlock_runbooks (name, version, text, author, added_ms) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[&name, &version, &text, &author, &now_ms],
                )
                .await
                .map_err(e)?;
            }
            let r = tx
                .query_one(
                    &format!("SELECT {COLUMNS} FROM airlock_runbooks WHERE name = $1 AND version = $2"),
                    &[&name, &version],
                )
                .await
                .map_err(e)?;
            tx.commit().await.map_err(e)?;
            Ok((row(&r), !known))
        })
    }

    fn versions(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        let name = name.to_string();
        self.db
            .run("reading a runbook's versions", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                versions_in(&conn, &name, &at).await
            })
    }

    fn current(&self) -> Result<Vec<Stored>, StoreError> {
        self.db
            .run("reading the runbooks", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let rows = conn
                    .query(
                        &format!(
                            "SELECT DISTINCT ON (name) {COLUMNS}, seq FROM airlock_runbooks \
                         ORDER BY name, seq DESC"
                        ),
                        &[],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok(rows
                    .iter()
                    .map(row)
                    .filter(|s| s.retired_ms.is_none())
                    .collect())
            })
    }

    fn approve(
        &self,
        name: &str,
        version: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<Stored, StoreError> {
        let (name, version, by) = (name.to_string(), version.to_string(), by.to_string());
        self.db
            .run("approving a runbook version", move |pool, at| async move {
                let e = |e| StoreError::from(unavailable(&at, e));
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                lock_key(&tx, LOCK_CLASS_RUNBOOKS, &name).await.map_err(e)?;
                let versions = versions_in(&tx, &name, &at).await?;
                let mut s = pick_whole(&name, &versions, &version)?.clone();
                may_approve(&s, &by)?;
                if s.approved_by.is_none() {
                    tx.execute(
                        "UPDATE airlock_runbooks SET approved_by = $3, approved_ms = $4 \
                     WHERE name = $1 AND version = $2",
                        &[&name, &s.version, &by, &now_ms],
                    )
                    .await
                    .map_err(e)?;
                    s.approved_by = Some(by);
                    s.approved_ms = Some(now_ms);
                }
                tx.commit().await.map_err(e)?;
                Ok(s)
            })
    }

    fn retire(&self, name: &str, now_ms: i64) -> Result<u32, StoreError> {
        let name = name.to_string();
        self.db.run("retiring a runbook", move |pool, at| async move {
            let e = |e| StoreError::from(unavailable(&at, e));
            let conn = connection(&pool, &at).await?;
            let known: i64 = conn
                .query_one("SELECT count(*) FROM airlock_runbooks WHERE name = $1", &[&name])
                .await
                .map_err(e)?
                .get(0);
            if known == 0 {
                return Err(StoreError::UnknownName(name));
            }
            let n = conn
                .execute(
                    "UPDATE airlock_runbooks SET retired_ms = $2 WHERE name = $1 AND retired_ms IS NULL",
                    &[&name, &now_ms],
                )
                .await
                .map_err(e)?;
            Ok(n as u32)
        })
    }
}
