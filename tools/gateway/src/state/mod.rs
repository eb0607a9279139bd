//! Everything the gateway keeps beyond one call — approvals, the audit
//! chain, rate buckets, bearer keys — behind one choice: `[state] backend = "sqlite"`
//! (one machine: a SQLite file and a JSONL file in the state directory,
//! buckets in memory) or `"postgres"` (a database every replica of a
//! deployment shares). Both kinds pass the same tests
//! (`tests/state.rs`); the gateway sees only the traits.

pub mod postgres;

use std::sync::Arc;

use crate::{
    approval::{ApprovalError, ApprovalStore, SqliteApprovals},
    audit::{AuditError, AuditLog, AuditStore},
    config::GatewayConfig,
    keys::KeyStore,
    rate::{LocalRate, RateLimits},
    shares::{ExecutionShares, LocalShares},
};

pub use postgres::{PgError, PostgresConfig};

/// The stores one gateway (or one operator command) works with.
#[derive(Clone)]
pub struct State {
    pub approvals: Arc<dyn ApprovalStore>,
    pub audit: Arc<dyn AuditStore>,
    pub rate: Arc<dyn RateLimits>,
    /// Places of executions per identity (`rate.executions_per_identity`).
    pub shares: Arc<dyn ExecutionShares>,
    /// Bearer keys kept with the rest of the state (PostgreSQL); on one
    /// machine they are in the enrollment file `serve --http` is given.
    pub keys: Option<Arc<dyn KeyStore>>,
    /// Sessions any replica can pick up (PostgreSQL only: one machine's
    /// sessions live in its memory).
    pub sessions: Option<Arc<dyn SessionRecords>>,
}

/// The longest session id a record is kept or looked up for.
pub const MAX_SESSION_ID_BYTES: usize = 256;
/// The largest session record kept; a larger one is not stored (its
/// session then lives on the replica that opened it only).
pub const MAX_SESSION_RECORD_BYTES: usize = 4 * 1024;

/// The most session records a deployment keeps; beyond, the oldest go
/// (their sessions then live on their own replica only). With the size
/// cap, the table stays under ~80 MiB whatever clients do.
pub const MAX_SESSION_RECORDS: i64 = 20_000;

/// The most sessions one identity keeps; opening another forgets its own
/// oldest (that session's next request is told to open a new one), so
/// one identity's sessions never push out everyone else's.
pub const MAX_SESSIONS_PER_IDENTITY: usize = 1_000;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the session store is unavailable: {0}")]
pub struct SessionError(pub String);

/// What a transport keeps about a client's session so that another
/// replica can continue it: opaque text, at most
/// [`MAX_SESSION_RECORD_BYTES`], kept a day after it was last stored.
pub trait SessionRecords: Send + Sync {
    fn put(&self, id: &str, record: &str) -> Result<(), SessionError>;
    fn get(&self, id: &str) -> Result<Option<String>, SessionError>;
    fn delete(&self, id: &str) -> Result<(), SessionError>;

    /// Records who opened session `id` (once: the first owner stays), so
    /// every replica can refuse the session to anyone else; past
    /// [`MAX_SESSIONS_PER_IDENTITY`] of that identity's, its oldest go.
    fn bind(&self, id: &str, identity: &str) -> Result<(), SessionError>;

    /// Who opened session `id`, if it is known.
    fn owner(&self, id: &str) -> Result<Option<String>, SessionError>;
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error("[state] backend \"postgres\": {0}")]
    Postgres(#[from] PgError),
}

impl State {
    /// Opens the stores `config` names: PostgreSQL when `config.postgres`
    /// is set (and then nothing in the state directory is touched), else
    /// the files in the state directory.
    pub fn open(config: &GatewayConfig) -> Result<Self, StateError> {
        let ttl_ms = (config.approval.ttl_secs as i64).saturating_mul(1000);
        let max_open = config.approval.max_open_per_identity;
        match &config.postgres {
            Some(pg) => {
                let db = postgres::Postgres::connect(pg)?;
                Ok(Self {
                    approvals: Arc::new(
                        postgres::approvals::PgApprovals::new(db.clone(), ttl_ms)
                            .with_max_open(max_open),
                    ),
                    audit: Arc::new(postgres::audit::PgAudit::new(db.clone())),
                    rate: Arc::new(postgres::rate::PgRate::new(db.clone())),
                    shares: Arc::new(postgres::shares::PgShares::new(db.clone())),
                    keys: Some(Arc::new(postgres::keys::PgKeys::new(db.clone()))),
                    sessions: Some(Arc::new(postgres::sessions::PgSessions::new(db))),
                })
            }
            None => Ok(Self {
                approvals: Arc::new(
                    SqliteApprovals::open(&config.approvals_db, ttl_ms)?.with_max_open(max_open),
                ),
                audit: Arc::new(AuditLog::open(&config.audit_file)?),
                rate: Arc::new(LocalRate::default()),
                shares: Arc::new(LocalShares::default()),
                keys: None,
                sessions: None,
            }),
        }
    }
}
