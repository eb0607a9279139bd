//! Where Airlock keeps what outlives one call: approvals, the audit
//! chain, rate buckets, places of executions, parked executions, bearer
//! keys and sessions.
//!
//! The gateway defines what is kept and the rules of keeping it (the
//! traits `ApprovalStore`, `AuditStore`, `RateLimits`, `ExecutionShares`,
//! `KeyStore`, `SessionRecords`, and the helpers every store shares); this
//! crate implements them twice, behind one choice an operator makes
//! (`[state] backend`):
//!
//! - [`local`]: one machine — a SQLite file for approvals, a JSONL file
//!   for the audit chain, an enrollment file for keys, buckets and places
//!   in memory;
//! - [`postgres`]: a database every replica of a deployment shares.
//!
//! Both pass one suite of tests (`tests/state.rs`). [`Place`] says which,
//! and opens the stores for a gateway or an operator command. Nothing
//! here knows tools, backends, MCP or the sandbox.

pub mod local;
pub mod postgres;

use std::{path::PathBuf, sync::Arc};

use airlock_gateway::{
    approval::ApprovalError,
    audit::AuditError,
    config::ApprovalConfig,
    state::{OpenError, State, Stores},
};

pub use local::{default_state_dir, state_dir_from, NoStateDir};
pub use postgres::{PgError, PostgresConfig};

/// The columns both approval stores read a request from, in `Request`'s
/// order.
pub(crate) const APPROVAL_COLUMNS: &str = "id, identity, tool, args_hash, summary, status, \
     created_ms, expires_ms, decided_by, plan, tool_key, detail, decided_via, reason";

/// Where a deployment's state lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// This machine's files (and memory): `[state] backend = "sqlite"`.
    Files {
        /// The SQLite file holding approvals.
        approvals_db: PathBuf,
        /// The hash-chained JSONL audit log.
        audit_file: PathBuf,
    },
    /// A PostgreSQL database every replica shares: `backend = "postgres"`.
    /// Nothing in the state directory is touched then.
    Postgres(PostgresConfig),
}

impl Place {
    /// Everything under one state directory: `approvals.db`, `audit.jsonl`.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Place::Files {
            approvals_db: dir.join("approvals.db"),
            audit_file: dir.join("audit.jsonl"),
        }
    }

    /// Opens the stores this place names, the approval store with the
    /// request lifetime and per-identity cap `approval` sets.
    pub fn open(&self, approval: &ApprovalConfig) -> Result<State, StateError> {
        let ttl_ms = (approval.ttl_secs as i64).saturating_mul(1000);
        let max_open = approval.max_open_per_identity;
        match self {
            Place::Postgres(pg) => {
                let db = postgres::Postgres::connect(pg)?;
                Ok(State {
                    approvals: Arc::new(
                        postgres::approvals::PgApprovals::new(db.clone(), ttl_ms)
                            .with_max_open(max_open),
                    ),
                    audit: Arc::new(postgres::audit::PgAudit::new(db.clone())),
                    rate: Arc::new(postgres::rate::PgRate::new(db.clone())),
                    shares: Arc::new(postgres::shares::PgShares::new(db.clone())),
                    keys: Some(Arc::new(postgres::keys::PgKeys::new(db.clone()))),
                    sessions: Some(Arc::new(postgres::sessions::PgSessions::new(db.clone()))),
                    console: Some(Arc::new(postgres::console::PgConsoleSessions::new(
                        db.clone(),
                    ))),
                    runbooks: Arc::new(postgres::runbooks::PgRunbooks::new(db.clone())),
                    parked: Arc::new(postgres::parked::PgParked::new(db)),
                })
            }
            Place::Files {
                approvals_db,
                audit_file,
            } => Ok(State {
                approvals: Arc::new(
                    local::SqliteApprovals::open(approvals_db, ttl_ms)?.with_max_open(max_open),
                ),
                audit: Arc::new(local::AuditLog::open(audit_file)?),
                rate: Arc::new(local::LocalRate::default()),
                shares: Arc::new(local::LocalShares::default()),
                keys: None,
                sessions: None,
                console: None,
                runbooks: Arc::new(local::SqliteRunbooks::open(
                    &airlock_edge::private_files::parent_of(approvals_db).join("runbooks.db"),
                )?),
                parked: Arc::new(local::SqliteParked::open(
                    &airlock_edge::private_files::parent_of(approvals_db).join("executions.db"),
                )?),
            }),
        }
    }
}

impl Stores for Place {
    fn open(&self, approval: &ApprovalConfig) -> Result<State, OpenError> {
        Ok(Place::open(self, approval)?)
    }
}

/// Why the stores could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Runbooks(#[from] airlock_runbooks::runbook::StoreError),
    #[error(transparent)]
    Parked(#[from] airlock_gateway::parked::ParkedUnavailable),
    #[error("[state] backend \"postgres\": {0}")]
    Postgres(#[from] PgError),
}
