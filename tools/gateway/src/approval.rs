//! Approvals for mutations, kept in SQLite so they survive restarts and can
//! be granted from another process (`airlock approvals approve ID`).
//!
//! An approval is bound to identity + tool + the SHA-256 of the exact
//! arguments, expires, and is used up by the one call it allowed: a
//! tampered argument, another identity or a second call needs a new one.
//!
//! The store stays small whatever a script does: an identity has at most
//! `max_open` requests waiting at once (more are refused, not filed), and
//! rows are deleted one TTL after they expired — at open and, during
//! [`ApprovalStore::check`], at most once a minute.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicI64, Ordering},
        Mutex,
    },
};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;

use crate::private_files::{parent_of, private_dir, private_file, StateDirError};

/// Default lifetime of a request, and of an approval once granted.
pub const DEFAULT_TTL_MS: i64 = 10 * 60 * 1000;

/// Default cap on one identity's requests waiting for a decision.
pub const DEFAULT_MAX_OPEN: u32 = 20;

/// Expired rows are looked for at most this often during `check`.
const PURGE_EVERY_MS: i64 = 60_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pending,
    Approved,
    Denied,
    Used,
}

impl Status {
    fn parse(s: &str) -> Status {
        match s {
            "approved" => Status::Approved,
            "denied" => Status::Denied,
            "used" => Status::Used,
            _ => Status::Pending,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Approved => "approved",
            Status::Denied => "denied",
            Status::Used => "used",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Request {
    pub id: String,
    pub identity: String,
    pub tool: String,
    pub args_hash: String,
    /// What the arguments were, for the person deciding (secrets masked).
    pub summary: String,
    pub status: Status,
    pub created_ms: i64,
    pub expires_ms: i64,
    pub decided_by: Option<String>,
}

impl Request {
    pub fn expired(&self, now_ms: i64) -> bool {
        now_ms >= self.expires_ms
    }
}

/// What the gateway should do with a call that needs approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// An approval matched and is now used up.
    Proceed { request_id: String },
    /// Not approved (yet): the pending request to point the operator at.
    Required(Request),
    /// An operator refused exactly this call.
    Denied(Request),
    /// No request was filed: the identity already has `limit` waiting.
    TooManyOpen { limit: u32 },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApprovalError {
    #[error("no approval request with id {0}; `airlock approvals list` shows the open ones")]
    NotFound(String),
    #[error("approval request {id} is already {status}")]
    NotPending { id: String, status: &'static str },
    #[error("approval request {0} has expired; run the script again to make a new one")]
    Expired(String),
    #[error("the approval store is unavailable: {0}")]
    Storage(String),
    #[error(transparent)]
    StateDir(#[from] StateDirError),
}

impl From<rusqlite::Error> for ApprovalError {
    fn from(e: rusqlite::Error) -> Self {
        ApprovalError::Storage(e.to_string())
    }
}

pub struct ApprovalStore {
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

const COLUMNS: &str =
    "id, identity, tool, args_hash, summary, status, created_ms, expires_ms, decided_by";

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
    })
}

impl ApprovalStore {
    /// Opens (creating if needed) the store at `path` and deletes rows
    /// long expired. Its directory is created 0700 or must be this user's
    /// alone; the file is created 0600 before SQLite opens it (SQLite gives
    /// its `-wal` and `-shm` files the database's mode).
    pub fn open(path: &Path, ttl_ms: i64) -> Result<Self, ApprovalError> {
        private_dir(parent_of(path))?;
        private_file(path)?;
        let conn = Connection::open(path)?;
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
        Self::init(Connection::open_in_memory()?, ttl_ms)
    }

    fn init(conn: Connection, ttl_ms: i64) -> Result<Self, ApprovalError> {
        // Another process (the CLI) may write while a server reads.
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
            ttl_ms,
            max_open: DEFAULT_MAX_OPEN,
            purged_ms: AtomicI64::new(i64::MIN),
        })
    }

    /// Deletes every row whose expiry passed more than one TTL before
    /// `now_ms`, whatever its status: nothing can use or decide it any
    /// more, and a denial has stopped counting. Returns how many went.
    pub fn purge(&self, now_ms: i64) -> Result<usize, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let n = conn.execute(
            "DELETE FROM approvals WHERE expires_ms < ?1",
            [now_ms.saturating_sub(self.ttl_ms)],
        )?;
        self.purged_ms.store(now_ms, Ordering::Relaxed);
        Ok(n)
    }

    /// How many rows the store holds, in any state.
    pub fn rows(&self) -> Result<u64, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM approvals", [], |r| r.get(0))?;
        Ok(n.max(0) as u64)
    }

    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    /// Looks for an approval of exactly this call and uses it up, or finds
    /// (or opens) the request an operator must decide.
    pub fn check(
        &self,
        identity: &str,
        tool: &str,
        args_hash: &str,
        summary: &str,
        now_ms: i64,
    ) -> Result<Check, ApprovalError> {
        // A clock that moved either way by a minute: time to look again.
        if self.purged_ms.load(Ordering::Relaxed).abs_diff(now_ms) >= PURGE_EVERY_MS as u64 {
            self.purge(now_ms)?;
        }
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let binding = params![identity, tool, args_hash, now_ms];
        let approved: Option<String> = tx
            .query_row(
                "SELECT id FROM approvals WHERE identity = ?1 AND tool = ?2 AND args_hash = ?3 \
                 AND status = 'approved' AND expires_ms > ?4 ORDER BY created_ms LIMIT 1",
                binding,
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = approved {
            tx.execute(
                "UPDATE approvals SET status = 'used', used_ms = ?2 WHERE id = ?1",
                params![id, now_ms],
            )?;
            tx.commit()?;
            return Ok(Check::Proceed { request_id: id });
        }
        let open = |status: &str| -> rusqlite::Result<Option<Request>> {
            tx.query_row(
                &format!(
                    "SELECT {COLUMNS} FROM approvals WHERE identity = ?1 AND tool = ?2 AND args_hash = ?3 \
                     AND status = '{status}' AND expires_ms > ?4 ORDER BY created_ms DESC LIMIT 1"
                ),
                binding,
                row,
            )
            .optional()
        };
        if let Some(denied) = open("denied")? {
            return Ok(Check::Denied(denied));
        }
        if let Some(pending) = open("pending")? {
            return Ok(Check::Required(pending));
        }
        let waiting: u32 = tx.query_row(
            "SELECT COUNT(*) FROM approvals WHERE identity = ?1 AND status = 'pending' AND expires_ms > ?2",
            params![identity, now_ms],
            |r| r.get(0),
        )?;
        if waiting >= self.max_open {
            return Ok(Check::TooManyOpen {
                limit: self.max_open,
            });
        }
        let request = Request {
            id: new_id()?,
            identity: identity.into(),
            tool: tool.into(),
            args_hash: args_hash.into(),
            summary: summary.into(),
            status: Status::Pending,
            created_ms: now_ms,
            expires_ms: now_ms + self.ttl_ms,
            decided_by: None,
        };
        tx.execute(
            "INSERT INTO approvals (id, identity, tool, args_hash, summary, status, created_ms, expires_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7)",
            params![request.id, identity, tool, args_hash, summary, now_ms, request.expires_ms],
        )?;
        tx.commit()?;
        Ok(Check::Required(request))
    }

    /// Requests, newest first; only those still open unless `all`.
    pub fn list(&self, now_ms: i64, all: bool) -> Result<Vec<Request>, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let sql = if all {
            format!("SELECT {COLUMNS} FROM approvals ORDER BY created_ms DESC")
        } else {
            format!("SELECT {COLUMNS} FROM approvals WHERE status IN ('pending', 'approved') AND expires_ms > ?1 ORDER BY created_ms DESC")
        };
        let mut stmt = conn.prepare(&sql)?;
        let rows = if all {
            stmt.query_map([], row)?
        } else {
            stmt.query_map([now_ms], row)?
        };
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn get(&self, id: &str) -> Result<Request, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row(
            &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
            [id],
            row,
        )
        .optional()?
        .ok_or_else(|| ApprovalError::NotFound(id.into()))
    }

    /// Grants a pending request; the approval then lives for the TTL.
    pub fn approve(&self, id: &str, by: &str, now_ms: i64) -> Result<Request, ApprovalError> {
        self.decide(id, by, now_ms, Status::Approved)
    }

    pub fn deny(&self, id: &str, by: &str, now_ms: i64) -> Result<Request, ApprovalError> {
        self.decide(id, by, now_ms, Status::Denied)
    }

    fn decide(
        &self,
        id: &str,
        by: &str,
        now_ms: i64,
        to: Status,
    ) -> Result<Request, ApprovalError> {
        let current = self.get(id)?;
        if current.status != Status::Pending {
            return Err(ApprovalError::NotPending {
                id: id.into(),
                status: current.status.as_str(),
            });
        }
        if current.expired(now_ms) {
            return Err(ApprovalError::Expired(id.into()));
        }
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let changed = conn.execute(
            "UPDATE approvals SET status = ?2, decided_by = ?3, decided_ms = ?4, expires_ms = ?5 \
             WHERE id = ?1 AND status = 'pending'",
            params![id, to.as_str(), by, now_ms, now_ms + self.ttl_ms],
        )?;
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

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn new_id() -> Result<String, ApprovalError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApprovalError::Storage(format!("no randomness for an id: {e}")))?;
    Ok(format!("ap-{}", hex::encode(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_000_000;

    fn store() -> ApprovalStore {
        ApprovalStore::in_memory(DEFAULT_TTL_MS).unwrap()
    }

    fn required(c: Check) -> Request {
        match c {
            Check::Required(r) => r,
            other => panic!("expected a request, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_is_single_use() {
        let s = store();
        let r = required(s.check("alice", "vm_stop", "h1", "node=pve1", T0).unwrap());
        assert_eq!(r.status, Status::Pending);
        // Asking again does not open a second request.
        assert_eq!(
            required(
                s.check("alice", "vm_stop", "h1", "node=pve1", T0 + 1)
                    .unwrap()
            )
            .id,
            r.id
        );
        s.approve(&r.id, "op", T0 + 2).unwrap();
        assert_eq!(
            s.check("alice", "vm_stop", "h1", "", T0 + 3).unwrap(),
            Check::Proceed {
                request_id: r.id.clone()
            }
        );
        // Replay: used up.
        let again = required(s.check("alice", "vm_stop", "h1", "", T0 + 4).unwrap());
        assert_ne!(again.id, r.id);
        assert_eq!(s.get(&r.id).unwrap().status, Status::Used);
        assert!(matches!(
            s.approve(&r.id, "op", T0 + 5),
            Err(ApprovalError::NotPending { .. })
        ));
    }

    #[test]
    fn bound_to_identity_tool_and_arguments() {
        let s = store();
        let r = required(s.check("alice", "vm_stop", "h1", "", T0).unwrap());
        s.approve(&r.id, "op", T0).unwrap();
        assert!(matches!(
            s.check("bob", "vm_stop", "h1", "", T0).unwrap(),
            Check::Required(_)
        ));
        assert!(matches!(
            s.check("alice", "vm_delete", "h1", "", T0).unwrap(),
            Check::Required(_)
        ));
        assert!(matches!(
            s.check("alice", "vm_stop", "h2", "", T0).unwrap(),
            Check::Required(_)
        ));
        assert!(matches!(
            s.check("alice", "vm_stop", "h1", "", T0).unwrap(),
            Check::Proceed { .. }
        ));
    }

    #[test]
    fn requests_and_approvals_expire() {
        let s = store();
        let r = required(s.check("alice", "t", "h", "", T0).unwrap());
        assert_eq!(
            s.approve(&r.id, "op", T0 + DEFAULT_TTL_MS),
            Err(ApprovalError::Expired(r.id.clone()))
        );
        let r = required(s.check("alice", "t", "h", "", T0 + DEFAULT_TTL_MS).unwrap());
        let granted_at = T0 + DEFAULT_TTL_MS + 10;
        s.approve(&r.id, "op", granted_at).unwrap();
        // Unused past its lifetime: no longer valid.
        assert!(matches!(
            s.check("alice", "t", "h", "", granted_at + DEFAULT_TTL_MS)
                .unwrap(),
            Check::Required(_)
        ));
    }

    #[test]
    fn denial_sticks_until_it_expires() {
        let s = store();
        let r = required(s.check("alice", "t", "h", "", T0).unwrap());
        s.deny(&r.id, "op", T0 + 1).unwrap();
        assert!(matches!(
            s.check("alice", "t", "h", "", T0 + 2).unwrap(),
            Check::Denied(_)
        ));
        assert!(matches!(
            s.check("alice", "t", "h", "", T0 + 2 + DEFAULT_TTL_MS)
                .unwrap(),
            Check::Required(_)
        ));
        assert!(matches!(
            s.approve("ap-nope", "op", T0),
            Err(ApprovalError::NotFound(_))
        ));
    }

    #[test]
    fn survives_a_restart() {
        // Opening purges by the real clock: this store lives in it.
        let now = wall_clock_ms();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/approvals.db");
        let id = {
            let s = ApprovalStore::open(&path, DEFAULT_TTL_MS).unwrap();
            // One from long ago, which the next open deletes.
            required(s.check("alice", "old", "h", "", T0).unwrap());
            required(s.check("alice", "t", "h", "", now).unwrap()).id
        };
        let s = ApprovalStore::open(&path, DEFAULT_TTL_MS).unwrap();
        assert_eq!(s.rows().unwrap(), 1, "the old request was purged at open");
        assert_eq!(s.list(now, false).unwrap()[0].id, id);
        s.approve(&id, "op", now).unwrap();
        let s2 = ApprovalStore::open(&path, DEFAULT_TTL_MS).unwrap();
        assert!(matches!(
            s2.check("alice", "t", "h", "", now).unwrap(),
            Check::Proceed { .. }
        ));
    }

    #[test]
    fn the_store_is_private() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/approvals.db");
        let s = ApprovalStore::open(&path, DEFAULT_TTL_MS).unwrap();
        required(s.check("alice", "t", "h", "", wall_clock_ms()).unwrap());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        for f in ["approvals.db", "approvals.db-wal", "approvals.db-shm"] {
            assert_eq!(mode(&path.with_file_name(f)), 0o600, "{f}");
        }
    }

    #[test]
    fn an_identity_has_at_most_max_open_requests_waiting() {
        let s = store().with_max_open(3);
        let ids: Vec<String> = (0..3)
            .map(|i| required(s.check("alice", "t", &format!("h{i}"), "", T0).unwrap()).id)
            .collect();
        assert_eq!(
            s.check("alice", "t", "h3", "", T0).unwrap(),
            Check::TooManyOpen { limit: 3 }
        );
        // Asking again about a waiting request files nothing new.
        assert_eq!(
            required(s.check("alice", "t", "h0", "", T0).unwrap()).id,
            ids[0]
        );
        // Another identity has its own allowance.
        required(s.check("bob", "t", "h3", "", T0).unwrap());
        // A decision makes room, and so does expiry.
        s.deny(&ids[0], "op", T0).unwrap();
        required(s.check("alice", "t", "h3", "", T0).unwrap());
        assert!(matches!(
            s.check("alice", "t", "h4", "", T0).unwrap(),
            Check::TooManyOpen { .. }
        ));
        required(
            s.check("alice", "t", "h4", "", T0 + DEFAULT_TTL_MS)
                .unwrap(),
        );
        assert_eq!(s.rows().unwrap(), 6);
    }

    #[test]
    fn expired_rows_are_purged_so_the_table_stays_small() {
        let s = store();
        let step = DEFAULT_TTL_MS / 4;
        let mut most = 0;
        for i in 0..1000 {
            let now = T0 + i * step;
            let r = required(s.check("alice", "t", &format!("h{i}"), "", now).unwrap());
            match i % 3 {
                0 => {
                    s.approve(&r.id, "op", now).unwrap();
                    assert!(matches!(
                        s.check("alice", "t", &format!("h{i}"), "", now).unwrap(),
                        Check::Proceed { .. }
                    ));
                }
                1 => drop(s.deny(&r.id, "op", now).unwrap()),
                _ => {} // left to expire
            }
            most = most.max(s.rows().unwrap());
        }
        // Alive: what expired less than a TTL ago, 2 TTLs of requests.
        assert!(most <= 9, "the table grew to {most} rows");
    }
}
