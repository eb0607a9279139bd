//! Everything the gateway keeps beyond one call — approvals, the audit
//! chain, rate buckets, places of executions, bearer keys, sessions — as
//! the traits their stores implement, and [`State`], the set of stores
//! one gateway (or one operator command) works with.
//!
//! The stores themselves live in the `airlock-state` crate, behind one
//! choice: `[state] backend = "sqlite"` (one machine's files, buckets in
//! memory) or `"postgres"` (a database every replica shares). The gateway
//! sees only the traits, and opens its stores through [`Stores`] once its
//! policy has been checked.

use std::sync::Arc;

use crate::{
    approval::ApprovalStore, audit::AuditStore, config::ApprovalConfig, keys::KeyStore,
    parked::ParkedStore, rate::RateLimits, shares::ExecutionShares,
};
use airlock_runbooks::runbook::RunbookStore;

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
    /// Sign-ins to the operator console any replica can check
    /// (PostgreSQL only, as `sessions`).
    pub console: Option<Arc<dyn ConsoleSessions>>,
    /// Runbook versions and their approvals.
    pub runbooks: Arc<dyn RunbookStore>,
    /// Durable executions waiting for decisions.
    pub parked: Arc<dyn ParkedStore>,
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

/// The most console sign-ins a deployment keeps; past it, those nearest
/// their end go first.
pub const MAX_CONSOLE_SESSIONS: i64 = 10_000;

/// The most console sign-ins one identity keeps; a new one ends its
/// oldest, so one login cannot sign everyone else out.
pub const MAX_CONSOLE_SESSIONS_PER_IDENTITY: i64 = 20;

/// The largest console sign-in record kept.
pub const MAX_CONSOLE_RECORD_BYTES: usize = 1024;

/// Sign-ins to the operator console, kept by the SHA-256 of the id in
/// the person's cookie (a copy of the store opens no session), as the
/// console's opaque record, until `expires_ms`.
pub trait ConsoleSessions: Send + Sync {
    /// Keeps a sign-in of `identity`; past
    /// [`MAX_CONSOLE_SESSIONS_PER_IDENTITY`] of theirs, their oldest go.
    fn put(
        &self,
        id_sha256: &[u8; 32],
        identity: &str,
        record: &str,
        expires_ms: i64,
    ) -> Result<(), SessionError>;
    /// The record, if the sign-in is known and `now_ms` is before its end.
    fn get(&self, id_sha256: &[u8; 32], now_ms: i64) -> Result<Option<String>, SessionError>;
    fn delete(&self, id_sha256: &[u8; 32]) -> Result<(), SessionError>;
}

/// Why a gateway's stores could not be opened, in the store's own words
/// (a file that is not private, a database that does not answer).
pub type OpenError = Box<dyn std::error::Error + Send + Sync>;

/// Where a gateway's state lives. [`crate::Gateway::new`] opens it after
/// the catalog and the policy have been checked, so a mistake in the
/// policy is reported before any database is connected to.
pub trait Stores {
    /// Opens the stores; `approval` carries the lifetime of requests and
    /// the cap on an identity's open ones, which the approval store keeps.
    fn open(&self, approval: &ApprovalConfig) -> Result<State, OpenError>;
}
