//! One machine's approvals, in a SQLite file in the state directory
//! (`approvals.db`), which the CLI opens beside a running server: every
//! step is one transaction, and a writer waits up to 5 s for another.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicI64, Ordering},
        Mutex,
    },
};

use airlock_edge::private_files::{parent_of, private_dir, private_file};
use airlock_gateway::{
    approval::{
        changes_text, key_of, new_id, new_key, parse_changes, plan_request, single_request,
        undecidable, untakeable, ApprovalError, ApprovalStore, Asked, Check, Decider, Request,
        Status, DEFAULT_MAX_OPEN, PURGE_EVERY_MS,
    },
    plan::{PlanError, PlannedChange},
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::APPROVAL_COLUMNS as COLUMNS;

/// SQLite's error, as the store's.
fn sqlite(e: rusqlite::Error) -> ApprovalError {
    ApprovalError::Storage(e.to_string())
}

/// One machine's approvals, in a SQLite file in the state directory.
pub struct SqliteApprovals {
    conn: Mutex<Connection>,
    ttl_ms: i64,
    max_open: u32,
    /// When expired rows were last deleted (the `now` of that call).
    purged_ms: AtomicI64,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS approvals (
    id          TEXT PRIMARY KEY,
    identity    TEXT NOT NULL,
    tool        TEXT NOT NULL,
    args_hash   TEXT NOT NULL,
    summary     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used')),
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    decided_by  TEXT,
    decided_ms  INTEGER,
    used_ms     INTEGER
);
CREATE INDEX IF NOT EXISTS approvals_binding ON approvals (identity, tool, args_hash, status);
";

/// Version 2: a plan's changes (JSON), on the plan's one row.
const SCHEMA_2: &str = "ALTER TABLE approvals ADD COLUMN plan TEXT;";

/// Version 3: the tool's stable key a request is bound to, the full
/// arguments when the summary had to summarise, and the channel a
/// decision came through.
const SCHEMA_3: &str = "
ALTER TABLE approvals ADD COLUMN tool_key TEXT;
ALTER TABLE approvals ADD COLUMN detail TEXT;
ALTER TABLE approvals ADD COLUMN decided_via TEXT;
CREATE INDEX IF NOT EXISTS approvals_key_binding ON approvals (identity, tool_key, args_hash, status);
";

/// Version 4: the key of the short hashes approvers see secrets by.
const SCHEMA_4: &str = "
CREATE TABLE IF NOT EXISTS airlock_meta (
    name   TEXT PRIMARY KEY,
    value  BLOB NOT NULL
);
";

/// Version 5: the reason a decision was given.
const SCHEMA_5: &str = "ALTER TABLE approvals ADD COLUMN reason TEXT;";

/// The schema version this build writes (`PRAGMA user_version`): 0 is a
/// new file, or one from before versions were kept (its table is the
/// same as version 1's).
const SCHEMA_VERSION: i64 = 5;

/// Brings the file to [`SCHEMA_VERSION`], refusing one a newer Airlock
/// wrote rather than guessing at its rows.
fn migrate(conn: &Connection) -> Result<(), ApprovalError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sqlite)?;
    if version > SCHEMA_VERSION {
        return Err(ApprovalError::Storage(format!(
            "the approvals database has schema version {version}, newer than the {SCHEMA_VERSION} this Airlock knows; run the newer Airlock, or move the file aside"
        )));
    }
    if version < 1 {
        conn.execute_batch(SCHEMA).map_err(sqlite)?;
    }
    if version < 2 {
        conn.execute_batch(SCHEMA_2).map_err(sqlite)?;
    }
    if version < 3 {
        conn.execute_batch(SCHEMA_3).map_err(sqlite)?;
    }
    if version < 4 {
        conn.execute_batch(SCHEMA_4).map_err(sqlite)?;
    }
    if version < 5 {
        conn.execute_batch(SCHEMA_5).map_err(sqlite)?;
    }
    if version < SCHEMA_VERSION {
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(sqlite)?;
    }
    Ok(())
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Request> {
    Ok(Request {
        id: r.get(0)?,
        identity: r.get(1)?,
        tool: r.get(2)?,
        args_hash: r.get(3)?,
        summary: r.get(4)?,
        status: Status::parse(&r.get::<_, String>(5)?),
        created_ms: r.get(6)?,
        expires_ms: r.get(7)?,
        decided_by: r.get(8)?,
        changes: parse_changes(r.get(9)?),
        tool_key: r.get(10)?,
        detail: r.get(11)?,
        decided_via: r.get(12)?,
        reason: r.get(13)?,
    })
}

impl SqliteApprovals {
    /// Opens (creating if needed) the store at `path` and deletes rows
    /// long expired. Its directory is created 0700 or must be this user's
    /// alone; the file is created 0600 before SQLite opens it (SQLite gives
    /// its `-wal` and `-shm` files the database's mode).
    pub fn open(path: &Path, ttl_ms: i64) -> Result<Self, ApprovalError> {
        private_dir(parent_of(path))?;
        private_file(path)?;
        let conn = Connection::open(path).map_err(sqlite)?;
        let store = Self::init(conn, ttl_ms)?;
        store.purge(wall_clock_ms())?;
        Ok(store)
    }

    /// Caps the requests one identity may have waiting at once.
    pub fn with_max_open(mut self, max_open: u32) -> Self {
        self.max_open = max_open;
        self
    }

    pub fn in_memory(ttl_ms: i64) -> Result<Self, ApprovalError> {
        Self::init(Connection::open_in_memory().map_err(sqlite)?, ttl_ms)
    }

    fn init(conn: Connection, ttl_ms: i64) -> Result<Self, ApprovalError> {
        // Another process (the CLI) may write while a server reads.
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sqlite)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sqlite)?;
        migrate(&conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            ttl_ms,
            max_open: DEFAULT_MAX_OPEN,
            purged_ms: AtomicI64::new(i64::MIN),
        })
    }
}

impl ApprovalStore for SqliteApprovals {
    fn purge(&self, now_ms: i64) -> Result<usize, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let n = conn
            .execute(
                "DELETE FROM approvals WHERE expires_ms < ?1",
                [now_ms.saturating_sub(self.ttl_ms)],
            )
            .map_err(sqlite)?;
        self.purged_ms.store(now_ms, Ordering::Relaxed);
        Ok(n)
    }

    fn rows(&self) -> Result<u64, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM approvals", [], |r| r.get(0))
            .map_err(sqlite)?;
        Ok(n.max(0) as u64)
    }

    fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    fn summary_key(&self) -> Result<[u8; 32], ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.execute(
            "INSERT OR IGNORE INTO airlock_meta (name, value) VALUES ('summary_key', ?1)",
            [new_key()?.to_vec()],
        )
        .map_err(sqlite)?;
        let key: Vec<u8> = conn
            .query_row(
                "SELECT value FROM airlock_meta WHERE name = 'summary_key'",
                [],
                |r| r.get(0),
            )
            .map_err(sqlite)?;
        key_of(&key)
    }

    fn check(&self, asked: &Asked<'_>, now_ms: i64) -> Result<Check, ApprovalError> {
        // A clock that moved either way by a minute: time to look again.
        if self.purged_ms.load(Ordering::Relaxed).abs_diff(now_ms) >= PURGE_EVERY_MS as u64 {
            self.purge(now_ms)?;
        }
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let binding = params![asked.identity, asked.tool_key, asked.args_hash, now_ms];
        let approved: Option<(String, Option<String>, Option<String>)> = tx
            .query_row(
                "SELECT id, decided_by, decided_via FROM approvals WHERE identity = ?1 AND tool_key = ?2 \
                 AND args_hash = ?3 AND status = 'approved' AND expires_ms > ?4 \
                 ORDER BY created_ms LIMIT 1",
                binding,
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional().map_err(sqlite)?;
        if let Some((id, decided_by, decided_via)) = approved {
            tx.execute(
                "UPDATE approvals SET status = 'used', used_ms = ?2 WHERE id = ?1",
                params![id, now_ms],
            )
            .map_err(sqlite)?;
            tx.commit().map_err(sqlite)?;
            return Ok(Check::Proceed {
                request_id: id,
                own: decided_by
                    .as_deref()
                    .is_some_and(|by| airlock_approver::person::same(by, asked.identity)),
                decided_by,
                decided_via,
            });
        }
        let open = |status: &str| -> rusqlite::Result<Option<Request>> {
            tx.query_row(
                &format!(
                    "SELECT {COLUMNS} FROM approvals WHERE identity = ?1 AND tool_key = ?2 AND args_hash = ?3 \
                     AND status = '{status}' AND expires_ms > ?4 ORDER BY created_ms DESC LIMIT 1"
                ),
                binding,
                row,
            )
            .optional()
        };
        if let Some(denied) = open("denied").map_err(sqlite)? {
            return Ok(Check::Denied(denied));
        }
        if let Some(pending) = open("pending").map_err(sqlite)? {
            return Ok(Check::Required(pending));
        }
        if waiting(&tx, asked.identity, now_ms).map_err(sqlite)? >= self.max_open {
            return Ok(Check::TooManyOpen {
                limit: self.max_open,
            });
        }
        let request = single_request(new_id()?, asked, now_ms, self.ttl_ms);
        file(&tx, &request).map_err(sqlite)?;
        tx.commit().map_err(sqlite)?;
        Ok(Check::Required(request))
    }

    fn file_plan(
        &self,
        id: &str,
        identity: &str,
        changes: &[PlannedChange],
        now_ms: i64,
    ) -> Result<Check, ApprovalError> {
        let request = plan_request(id, identity, changes, now_ms, self.ttl_ms);
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        if waiting(&tx, identity, now_ms).map_err(sqlite)? >= self.max_open {
            return Ok(Check::TooManyOpen {
                limit: self.max_open,
            });
        }
        file(&tx, &request).map_err(sqlite)?;
        tx.commit().map_err(sqlite)?;
        Ok(Check::Required(request))
    }

    fn take_plan(&self, id: &str, identity: &str, now_ms: i64) -> Result<Request, PlanError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let current = tx
            .query_row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                [id],
                row,
            )
            .optional()
            .map_err(sqlite)?
            .ok_or_else(|| PlanError::NotFound(id.into()))?;
        if let Some(e) = untakeable(&current, identity, now_ms) {
            return Err(e);
        }
        tx.execute(
            "UPDATE approvals SET status = 'used', used_ms = ?2 WHERE id = ?1 AND status = 'approved'",
            params![id, now_ms],
        )
        .map_err(sqlite)?;
        tx.commit().map_err(sqlite)?;
        Ok(Request {
            status: Status::Used,
            ..current
        })
    }

    fn list(&self, now_ms: i64, all: bool) -> Result<Vec<Request>, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let sql = if all {
            format!("SELECT {COLUMNS} FROM approvals ORDER BY created_ms DESC")
        } else {
            format!("SELECT {COLUMNS} FROM approvals WHERE status IN ('pending', 'approved') AND expires_ms > ?1 ORDER BY created_ms DESC")
        };
        let mut stmt = conn.prepare(&sql).map_err(sqlite)?;
        let rows = if all {
            stmt.query_map([], row).map_err(sqlite)?
        } else {
            stmt.query_map([now_ms], row).map_err(sqlite)?
        };
        rows.collect::<Result<_, _>>().map_err(sqlite)
    }

    fn get(&self, id: &str) -> Result<Request, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row(
            &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
            [id],
            row,
        )
        .optional()
        .map_err(sqlite)?
        .ok_or_else(|| ApprovalError::NotFound(id.into()))
    }

    fn decide(
        &self,
        id: &str,
        decider: &Decider,
        now_ms: i64,
        to: Status,
    ) -> Result<Request, ApprovalError> {
        if let Some(e) = undecidable(&self.get(id)?, decider, now_ms, to) {
            return Err(e);
        }
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let changed = conn.execute(
            "UPDATE approvals SET status = ?2, decided_by = ?3, decided_ms = ?4, expires_ms = ?5, \
             decided_via = ?6, reason = ?7 WHERE id = ?1 AND status = 'pending'",
            params![
                id,
                to.as_str(),
                decider.who,
                now_ms,
                now_ms + self.ttl_ms,
                decider.channel.as_str(),
                decider.reason
            ],
        ).map_err(sqlite)?;
        drop(conn);
        if changed == 0 {
            return Err(ApprovalError::NotPending {
                id: id.into(),
                status: "decided",
            });
        }
        self.get(id)
    }
}

/// Files `request` (a single call's or a plan's) as pending.
fn file(tx: &rusqlite::Transaction<'_>, request: &Request) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO approvals (id, identity, tool, args_hash, summary, status, created_ms, expires_ms, \
         plan, tool_key, detail) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7, ?8, ?9, ?10)",
        params![
            request.id,
            request.identity,
            request.tool,
            request.args_hash,
            request.summary,
            request.created_ms,
            request.expires_ms,
            changes_text(request),
            request.tool_key,
            request.detail
        ],
    )?;
    Ok(())
}

/// Requests `identity` has waiting for a decision: what `max_open` caps,
/// single calls and plans alike.
fn waiting(tx: &rusqlite::Transaction<'_>, identity: &str, now_ms: i64) -> rusqlite::Result<u32> {
    tx.query_row(
        "SELECT COUNT(*) FROM approvals WHERE identity = ?1 AND status = 'pending' AND expires_ms > ?2",
        params![identity, now_ms],
        |r| r.get(0),
    )
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

// `tests/state.rs`; here, what only the SQLite file has.
#[cfg(test)]
mod tests {
    use super::*;
    use airlock_gateway::approval::DEFAULT_TTL_MS;

    #[test]
    fn the_store_is_private() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/approvals.db");
        let s = SqliteApprovals::open(&path, DEFAULT_TTL_MS).unwrap();
        let asked = Asked {
            identity: "alice",
            tool: "t",
            tool_key: "b:t",
            args_hash: "h",
            summary: "",
            detail: None,
        };
        let check = s.check(&asked, wall_clock_ms()).unwrap();
        assert!(matches!(check, Check::Required(_)), "{check:?}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        for f in ["approvals.db", "approvals.db-wal", "approvals.db-shm"] {
            assert_eq!(mode(&path.with_file_name(f)), 0o600, "{f}");
        }
    }

    #[test]
    fn a_file_from_before_schema_versions_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("approvals.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute(
                "INSERT INTO approvals (id, identity, tool, args_hash, summary, status, created_ms, expires_ms) \
                 VALUES ('ap-1', 'alice', 't', 'h', '', 'pending', ?1, ?2)",
                params![wall_clock_ms(), wall_clock_ms() + DEFAULT_TTL_MS],
            )
            .unwrap();
        }
        let s = SqliteApprovals::open(&path, DEFAULT_TTL_MS).unwrap();
        assert_eq!(s.get("ap-1").unwrap().status, Status::Pending);
        assert_eq!(s.get("ap-1").unwrap().changes, None);
        let conn = s.conn.lock().unwrap();
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }
}
