//! `rate.executions_per_identity`: how many executions one identity may
//! have started and not ended across the whole deployment.
//!
//! Each replica already shares its own sandbox slots fairly between
//! identities (`[sandbox.capacity] executions_per_identity`); behind a
//! load balancer one identity could still hold that share on every
//! replica. With this set, every execution takes a place before it
//! starts and gives it back when it ends; the replicas of a deployment
//! count places in PostgreSQL, one process in memory (both in
//! `airlock-state`).
//! A place is held until its execution ends, or at the latest
//! `rate.execution_hold_ms` after it was taken, so a replica that died
//! with executions running does not hold their places for good.

use crate::rate::RateUnavailable;

/// Places of executions, counted per identity.
pub trait ExecutionShares: Send + Sync {
    /// Takes a place for `execution` of `identity`, held until `until_ms`
    /// at the latest, unless `identity` already holds `max` (then
    /// `Ok(false)` and nothing changed).
    fn take(
        &self,
        identity: &str,
        execution: &str,
        max: u32,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, RateUnavailable>;

    /// Gives `execution`'s place back (nothing if it holds none).
    fn give_back(&self, identity: &str, execution: &str) -> Result<(), RateUnavailable>;
}
