//! Approvals for mutations, kept in a store that outlives the process and
//! that another process can decide in (`airlock approvals approve ID`):
//! one machine's SQLite file ([`SqliteApprovals`]), or a PostgreSQL
//! database every replica shares (`state::postgres`). Both pass the same
//! tests (`tests/state.rs`).
//!
//! An approval is bound to identity + the tool's stable key (which no
//! backend can move to another tool: `ToolSpec::key`) + the SHA-256 of
//! the exact arguments, expires, and is used up by the one call it
//! allowed: a tampered argument, another identity or a second call needs
//! a new one. Who may decide is [`crate::decision`]'s rule: never the
//! requester, unless the operator allowed it.
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

use crate::{
    decision::{self, Decider},
    plan::{self, PlanError, PlannedChange, PLAN_TOOL},
    private_files::{parent_of, private_dir, private_file, StateDirError},
};

/// Default lifetime of a request, and of an approval once granted.
pub const DEFAULT_TTL_MS: i64 = 10 * 60 * 1000;

/// Default cap on one identity's requests waiting for a decision.
pub const DEFAULT_MAX_OPEN: u32 = 20;

/// Expired rows are looked for at most this often during `check`.
pub(crate) const PURGE_EVERY_MS: i64 = 60_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pending,
    Approved,
    Denied,
    Used,
}

impl Status {
    pub(crate) fn parse(s: &str) -> Status {
        match s {
            "approved" => Status::Approved,
            "denied" => Status::Denied,
            "used" => Status::Used,
            _ => Status::Pending,
        }
    }

    pub fn as_str(self) -> &'static str {
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
    /// The tool's name in the catalog when the request was filed, for
    /// the person deciding.
    pub tool: String,
    /// The tool's stable key, which the approval is bound to (`None` on
    /// rows filed before keys, which then match no call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_key: Option<String>,
    pub args_hash: String,
    /// What the arguments were, for the person deciding: every value that
    /// decides, long ones summarised (`summary::Rendered::short`).
    pub summary: String,
    /// The arguments in full, when `summary` had to summarise a long
    /// value (`airlock approvals show ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub status: Status,
    pub created_ms: i64,
    pub expires_ms: i64,
    pub decided_by: Option<String>,
    /// The channel the decision came through (`cli`, `client`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_via: Option<String>,
    /// A plan's changes, in order (`tool` is then [`PLAN_TOOL`] and
    /// `args_hash` their [`plan::list_hash`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<PlannedChange>>,
}

impl Request {
    pub fn expired(&self, now_ms: i64) -> bool {
        now_ms >= self.expires_ms
    }

    /// Whether the person who decided is the identity that asked.
    pub fn decided_by_requester(&self) -> bool {
        self.decided_by.as_deref() == Some(self.identity.as_str())
    }
}

/// A call that needs approval, as the store binds and files it.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    pub identity: &'a str,
    /// The catalog name, shown.
    pub tool: &'a str,
    /// The stable key, bound.
    pub tool_key: &'a str,
    pub args_hash: &'a str,
    pub summary: &'a str,
    pub detail: Option<&'a str>,
}

/// What the gateway should do with a call that needs approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// An approval matched and is now used up; who granted it, through
    /// which channel, and whether it was the requester, for the audit.
    Proceed {
        request_id: String,
        decided_by: Option<String>,
        decided_via: Option<String>,
        own: bool,
    },
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
    #[error("approval request {id} was asked by {identity}, and nobody approves their own request: another person must decide it (`airlock approvals approve {id}` as someone else), or the operator allows {identity} to approve its own with `approve_own = true`")]
    OwnRequest { id: String, identity: String },
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

/// One machine's approvals, in a SQLite file in the state directory.
pub struct SqliteApprovals {
    conn: Mutex<Connection>,
    ttl_ms: i64,
    max_open: u32,
    /// When expired rows were last deleted (the `now` of that call).
    purged_ms: AtomicI64,
}

/// Where approval requests are filed, decided and used up. Every method
/// is one atomic step: two gateways checking the same approved call at
/// once (two threads, or two replicas on one database) use it once.
pub trait ApprovalStore: Send + Sync {
    /// Looks for an approval of exactly this call (identity, tool key,
    /// argument hash) and uses it up, or finds (or opens) the request an
    /// operator must decide.
    fn check(&self, asked: &Asked<'_>, now_ms: i64) -> Result<Check, ApprovalError>;

    /// Requests, newest first; only those still open unless `all`.
    fn list(&self, now_ms: i64, all: bool) -> Result<Vec<Request>, ApprovalError>;

    fn get(&self, id: &str) -> Result<Request, ApprovalError>;

    /// Decides a pending, unexpired request (`to` is `Approved` or
    /// `Denied`); the decision then lives for the TTL. Refuses a decider
    /// approving their own request without `approve_own`
    /// ([`decision::refusal`]). Callers that write the decision to the
    /// audit use [`decision::decide`].
    fn decide(
        &self,
        id: &str,
        decider: &Decider,
        now_ms: i64,
        to: Status,
    ) -> Result<Request, ApprovalError>;

    /// Deletes every row whose expiry passed more than one TTL before
    /// `now_ms`, whatever its status: nothing can use or decide it any
    /// more, and a denial has stopped counting. Returns how many went.
    fn purge(&self, now_ms: i64) -> Result<usize, ApprovalError>;

    /// How many rows the store holds, in any state.
    fn rows(&self) -> Result<u64, ApprovalError>;

    fn ttl_ms(&self) -> i64;

    /// Files the plan `id` of `identity` as one pending request (the
    /// person decides it whole), counted against the identity's cap like
    /// any request: `Check::Required` or `Check::TooManyOpen`.
    fn file_plan(
        &self,
        id: &str,
        identity: &str,
        changes: &[PlannedChange],
        now_ms: i64,
    ) -> Result<Check, ApprovalError>;

    /// The deployment's key for the short hashes approvers see secrets by
    /// (`summary::SummaryKey`): made once, at random, kept with the
    /// approvals, the same for every replica.
    fn summary_key(&self) -> Result<[u8; 32], ApprovalError>;

    /// Takes `identity`'s approved plan `id` for applying: approved →
    /// used in one step, so it applies once whatever runs at the same
    /// time; refuses a plan that is another identity's, not approved,
    /// used, expired, or whose changes no longer hash to what was filed.
    fn take_plan(&self, id: &str, identity: &str, now_ms: i64) -> Result<Request, PlanError>;

    /// Grants a pending request; the approval then lives for the TTL.
    fn approve(&self, id: &str, by: &Decider, now_ms: i64) -> Result<Request, ApprovalError> {
        self.decide(id, by, now_ms, Status::Approved)
    }

    fn deny(&self, id: &str, by: &Decider, now_ms: i64) -> Result<Request, ApprovalError> {
        self.decide(id, by, now_ms, Status::Denied)
    }
}

/// A plan request's row before it is filed: the table as its summary,
/// the list hash as its argument hash.
pub(crate) fn plan_request(
    id: &str,
    identity: &str,
    changes: &[PlannedChange],
    now_ms: i64,
    ttl_ms: i64,
) -> Request {
    Request {
        id: id.into(),
        identity: identity.into(),
        tool: PLAN_TOOL.into(),
        tool_key: None,
        args_hash: plan::list_hash(changes),
        summary: plan::table(changes),
        detail: None,
        status: Status::Pending,
        created_ms: now_ms,
        expires_ms: now_ms + ttl_ms,
        decided_by: None,
        decided_via: None,
        changes: Some(changes.to_vec()),
    }
}

/// Why `current` cannot be applied by `identity` at `now_ms`, if it
/// cannot.
pub(crate) fn untakeable(current: &Request, identity: &str, now_ms: i64) -> Option<PlanError> {
    let id = || current.id.clone();
    let Some(changes) = current
        .changes
        .as_ref()
        .filter(|_| current.tool == PLAN_TOOL)
    else {
        return Some(PlanError::NotFound(id()));
    };
    if current.identity != identity {
        return Some(PlanError::OtherIdentity(id()));
    }
    if current.status == Status::Used {
        return Some(PlanError::Used(id()));
    }
    if current.expired(now_ms) {
        return Some(PlanError::Expired(id()));
    }
    match current.status {
        Status::Used | Status::Approved => {}
        Status::Pending => {
            return Some(PlanError::NotApproved {
                id: id(),
                status: "pending",
                what: "an operator must approve it first (`airlock approvals approve ID`, or the person in the client)",
            })
        }
        Status::Denied => {
            return Some(PlanError::NotApproved {
                id: id(),
                status: "denied",
                what: "it was refused; change the script and plan again",
            })
        }
    }
    if plan::list_hash(changes) != current.args_hash || plan::table(changes) != current.summary {
        return Some(PlanError::Tampered(id()));
    }
    None
}

/// Reads a plan's stored changes; `None` for a single call's row.
pub(crate) fn parse_changes(text: Option<String>) -> Option<Vec<PlannedChange>> {
    // Unreadable changes read as an empty list: its hash then differs
    // from the filed one, and taking it is refused as tampered.
    text.map(|t| serde_json::from_str(&t).unwrap_or_default())
}

pub(crate) fn changes_text(r: &Request) -> Option<String> {
    r.changes
        .as_ref()
        .map(|c| serde_json::to_string(c).expect("changes serialize"))
}

/// Why `decider` cannot move `current` to `to` at `now_ms`, if they
/// cannot.
pub(crate) fn undecidable(
    current: &Request,
    decider: &Decider,
    now_ms: i64,
    to: Status,
) -> Option<ApprovalError> {
    if let Some(refused) = decision::refusal(current, decider, to) {
        return Some(refused);
    }
    if current.status != Status::Pending {
        return Some(ApprovalError::NotPending {
            id: current.id.clone(),
            status: current.status.as_str(),
        });
    }
    if current.expired(now_ms) {
        return Some(ApprovalError::Expired(current.id.clone()));
    }
    None
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

/// The schema version this build writes (`PRAGMA user_version`): 0 is a
/// new file, or one from before versions were kept (its table is the
/// same as version 1's).
const SCHEMA_VERSION: i64 = 4;

/// Brings the file to [`SCHEMA_VERSION`], refusing one a newer Airlock
/// wrote rather than guessing at its rows.
fn migrate(conn: &Connection) -> Result<(), ApprovalError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(ApprovalError::Storage(format!(
            "the approvals database has schema version {version}, newer than the {SCHEMA_VERSION} this Airlock knows; run the newer Airlock, or move the file aside"
        )));
    }
    if version < 1 {
        conn.execute_batch(SCHEMA)?;
    }
    if version < 2 {
        conn.execute_batch(SCHEMA_2)?;
    }
    if version < 3 {
        conn.execute_batch(SCHEMA_3)?;
    }
    if version < 4 {
        conn.execute_batch(SCHEMA_4)?;
    }
    if version < SCHEMA_VERSION {
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    Ok(())
}

/// The columns every store reads a request from, in [`Request`]'s order.
pub(crate) const COLUMNS: &str = "id, identity, tool, args_hash, summary, status, created_ms, \
     expires_ms, decided_by, plan, tool_key, detail, decided_via";

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
    })
}

/// A new pending request for `asked`.
pub(crate) fn single_request(id: String, asked: &Asked<'_>, now_ms: i64, ttl_ms: i64) -> Request {
    Request {
        id,
        identity: asked.identity.into(),
        tool: asked.tool.into(),
        tool_key: Some(asked.tool_key.into()),
        args_hash: asked.args_hash.into(),
        summary: asked.summary.into(),
        detail: asked.detail.map(str::to_string),
        status: Status::Pending,
        created_ms: now_ms,
        expires_ms: now_ms + ttl_ms,
        decided_by: None,
        decided_via: None,
        changes: None,
    }
}

impl SqliteApprovals {
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
        let n = conn.execute(
            "DELETE FROM approvals WHERE expires_ms < ?1",
            [now_ms.saturating_sub(self.ttl_ms)],
        )?;
        self.purged_ms.store(now_ms, Ordering::Relaxed);
        Ok(n)
    }

    fn rows(&self) -> Result<u64, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM approvals", [], |r| r.get(0))?;
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
        )?;
        let key: Vec<u8> = conn.query_row(
            "SELECT value FROM airlock_meta WHERE name = 'summary_key'",
            [],
            |r| r.get(0),
        )?;
        key_of(&key)
    }

    fn check(&self, asked: &Asked<'_>, now_ms: i64) -> Result<Check, ApprovalError> {
        // A clock that moved either way by a minute: time to look again.
        if self.purged_ms.load(Ordering::Relaxed).abs_diff(now_ms) >= PURGE_EVERY_MS as u64 {
            self.purge(now_ms)?;
        }
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let binding = params![asked.identity, asked.tool_key, asked.args_hash, now_ms];
        let approved: Option<(String, Option<String>, Option<String>)> = tx
            .query_row(
                "SELECT id, decided_by, decided_via FROM approvals WHERE identity = ?1 AND tool_key = ?2 \
                 AND args_hash = ?3 AND status = 'approved' AND expires_ms > ?4 \
                 ORDER BY created_ms LIMIT 1",
                binding,
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        if let Some((id, decided_by, decided_via)) = approved {
            tx.execute(
                "UPDATE approvals SET status = 'used', used_ms = ?2 WHERE id = ?1",
                params![id, now_ms],
            )?;
            tx.commit()?;
            return Ok(Check::Proceed {
                request_id: id,
                own: decided_by.as_deref() == Some(asked.identity),
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
        if let Some(denied) = open("denied")? {
            return Ok(Check::Denied(denied));
        }
        if let Some(pending) = open("pending")? {
            return Ok(Check::Required(pending));
        }
        if waiting(&tx, asked.identity, now_ms)? >= self.max_open {
            return Ok(Check::TooManyOpen {
                limit: self.max_open,
            });
        }
        let request = single_request(new_id()?, asked, now_ms, self.ttl_ms);
        file(&tx, &request)?;
        tx.commit()?;
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
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if waiting(&tx, identity, now_ms)? >= self.max_open {
            return Ok(Check::TooManyOpen {
                limit: self.max_open,
            });
        }
        file(&tx, &request)?;
        tx.commit()?;
        Ok(Check::Required(request))
    }

    fn take_plan(&self, id: &str, identity: &str, now_ms: i64) -> Result<Request, PlanError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(ApprovalError::from)?;
        let current = tx
            .query_row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                [id],
                row,
            )
            .optional()
            .map_err(ApprovalError::from)?
            .ok_or_else(|| PlanError::NotFound(id.into()))?;
        if let Some(e) = untakeable(&current, identity, now_ms) {
            return Err(e);
        }
        tx.execute(
            "UPDATE approvals SET status = 'used', used_ms = ?2 WHERE id = ?1 AND status = 'approved'",
            params![id, now_ms],
        )
        .map_err(ApprovalError::from)?;
        tx.commit().map_err(ApprovalError::from)?;
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
        let mut stmt = conn.prepare(&sql)?;
        let rows = if all {
            stmt.query_map([], row)?
        } else {
            stmt.query_map([now_ms], row)?
        };
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn get(&self, id: &str) -> Result<Request, ApprovalError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row(
            &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
            [id],
            row,
        )
        .optional()?
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
             decided_via = ?6 WHERE id = ?1 AND status = 'pending'",
            params![
                id,
                to.as_str(),
                decider.who,
                now_ms,
                now_ms + self.ttl_ms,
                decider.channel.as_str()
            ],
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

/// 32 random bytes for a new summary key.
pub(crate) fn new_key() -> Result<[u8; 32], ApprovalError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| ApprovalError::Storage(format!("no randomness for a key: {e}")))?;
    Ok(key)
}

/// A stored summary key, checked for its length.
pub(crate) fn key_of(stored: &[u8]) -> Result<[u8; 32], ApprovalError> {
    stored.try_into().map_err(|_| {
        ApprovalError::Storage(format!(
            "the stored summary key has {} bytes, not 32",
            stored.len()
        ))
    })
}

pub(crate) fn new_id() -> Result<String, ApprovalError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApprovalError::Storage(format!("no randomness for an id: {e}")))?;
    Ok(format!("ap-{}", hex::encode(bytes)))
}

// The behaviour every store shares is tested once for all of them in
// `tests/state.rs`; here, what only the SQLite file has.
#[cfg(test)]
mod tests {
    use super::*;

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
