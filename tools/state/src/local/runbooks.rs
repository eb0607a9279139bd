//! One machine's runbook versions, in a SQLite file beside the approvals
//! (`runbooks.db`), which `airlock runbook` opens beside a running
//! server: each step is one transaction, and a writer waits up to 5 s.

use std::{path::Path, sync::Mutex};

use airlock_runbooks::runbook::{
    may_approve, pick_whole, version_of, RunbookStore, StoreError, Stored,
};
use rusqlite::{params, Connection, TransactionBehavior};

fn sqlite(e: impl std::fmt::Display) -> StoreError {
    StoreError::Storage(e.to_string())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runbooks (
    name         TEXT NOT NULL,
    version      TEXT NOT NULL,
    text         TEXT NOT NULL,
    author       TEXT NOT NULL,
    added_ms     INTEGER NOT NULL,
    approved_by  TEXT,
    approved_ms  INTEGER,
    retired_ms   INTEGER,
    seq          INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX IF NOT EXISTS runbooks_current ON runbooks (name, seq DESC);
";

const SCHEMA_VERSION: i64 = 1;

const COLUMNS: &str = "name, version, text, author, added_ms, approved_by, approved_ms, retired_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Stored> {
    Ok(Stored {
        name: r.get(0)?,
        version: r.get(1)?,
        text: r.get(2)?,
        author: r.get(3)?,
        added_ms: r.get(4)?,
        approved_by: r.get(5)?,
        approved_ms: r.get(6)?,
        retired_ms: r.get(7)?,
    })
}

/// Runbook versions in one SQLite file.
pub struct SqliteRunbooks {
    conn: Mutex<Connection>,
}

impl SqliteRunbooks {
    /// Opens (creating if needed) the store at `path`, private to this
    /// user as the approvals are.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = super::sqlite_file::open(path, "runbooks", SCHEMA, SCHEMA_VERSION)
            .map_err(StoreError::Storage)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn versions_in(conn: &Connection, name: &str) -> Result<Vec<Stored>, StoreError> {
    let mut st = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM runbooks WHERE name = ?1 ORDER BY seq DESC"
        ))
        .map_err(sqlite)?;
    let rows = st.query_map(params![name], row).map_err(sqlite)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(sqlite)
}

impl RunbookStore for SqliteRunbooks {
    fn add(
        &self,
        name: &str,
        text: &str,
        author: &str,
        now_ms: i64,
    ) -> Result<(Stored, bool), StoreError> {
        let version = version_of(text);
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let seq: i64 = tx
            .query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM runbooks", [], |r| {
                r.get(0)
            })
            .map_err(sqlite)?;
        let known = tx
            .execute(
                "UPDATE runbooks SET seq = ?3, retired_ms = NULL, \
                 approved_by = CASE WHEN retired_ms IS NULL THEN approved_by END, \
                 approved_ms = CASE WHEN retired_ms IS NULL THEN approved_ms END \
                 WHERE name = ?1 AND version = ?2",
                params![name, version, seq],
            )
            .map_err(sqlite)?
            > 0;
        if !known {
            tx.execute(
                "INSERT INTO runbooks (name, version, text, author, added_ms, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![name, version, text, author, now_ms, seq],
            )
            .map_err(sqlite)?;
        }
        let stored = tx
            .query_row(
                &format!("SELECT {COLUMNS} FROM runbooks WHERE name = ?1 AND version = ?2"),
                params![name, version],
                row,
            )
            .map_err(sqlite)?;
        tx.commit().map_err(sqlite)?;
        Ok((stored, !known))
    }

    fn versions(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        versions_in(&self.conn(), name)
    }

    fn current(&self) -> Result<Vec<Stored>, StoreError> {
        let conn = self.conn();
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM runbooks r WHERE retired_ms IS NULL AND seq = \
                 (SELECT MAX(seq) FROM runbooks WHERE name = r.name) ORDER BY name"
            ))
            .map_err(sqlite)?;
        let rows = st.query_map([], row).map_err(sqlite)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sqlite)
    }

    fn approve(
        &self,
        name: &str,
        version: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<Stored, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let versions = versions_in(&tx, name)?;
        let mut s = pick_whole(name, &versions, version)?.clone();
        may_approve(&s, by)?;
        if s.approved_by.is_none() {
            tx.execute(
                "UPDATE runbooks SET approved_by = ?3, approved_ms = ?4 WHERE name = ?1 AND version = ?2",
                params![name, s.version, by, now_ms],
            )
            .map_err(sqlite)?;
            s.approved_by = Some(by.to_string());
            s.approved_ms = Some(now_ms);
        }
        tx.commit().map_err(sqlite)?;
        Ok(s)
    }

    fn retire(&self, name: &str, now_ms: i64) -> Result<u32, StoreError> {
        let conn = self.conn();
        let known: i64 = conn
            .query_row(
                "SELECT count(*) FROM runbooks WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .map_err(sqlite)?;
        if known == 0 {
            return Err(StoreError::UnknownName(name.into()));
        }
        let n = conn
            .execute(
                "UPDATE runbooks SET retired_ms = ?2 WHERE name = ?1 AND retired_ms IS NULL",
                params![name, now_ms],
            )
            .map_err(sqlite)?;
        Ok(n as u32)
    }
}
