//! `rate.calls_per_minute`: a token bucket per identity, `per_minute`
//! tokens, refilled continuously by the gateway's clock (so tests can
//! move it). One process keeps its buckets in memory ([`LocalRate`]); the
//! replicas of a deployment share them in PostgreSQL (`state::postgres`),
//! so the limit holds for the deployment, not per replica.

use std::{collections::HashMap, sync::Mutex};

/// The rate limiter could not be asked; the call is refused (fail closed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the rate limiter's store is unavailable: {0}")]
pub struct RateUnavailable(pub String);

/// Takes one token of `identity`'s bucket, or says there is none left.
pub trait RateLimits: Send + Sync {
    /// `Ok(true)`: a token was taken; `Ok(false)`: the bucket is empty and
    /// nothing changed. `per_minute` is never 0 (0 turns the limit off
    /// before any store is asked).
    fn take(&self, identity: &str, per_minute: u32, now_ms: i64) -> Result<bool, RateUnavailable>;
}

/// One bucket's state: tokens left as of `at_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub tokens: f64,
    pub at_ms: i64,
}

impl Bucket {
    /// A new identity's bucket: full.
    pub fn full(per_minute: u32, now_ms: i64) -> Self {
        Self {
            tokens: per_minute as f64,
            at_ms: now_ms,
        }
    }

    /// Refills for the time since `at_ms` and takes a token if there is
    /// one. A clock set back refills nothing and never moves `at_ms` back.
    /// Every store computes exactly this (PostgreSQL in SQL).
    pub fn take(&mut self, per_minute: u32, now_ms: i64) -> bool {
        let elapsed_ms = now_ms.saturating_sub(self.at_ms).max(0);
        let refill = elapsed_ms as f64 / 60_000.0 * per_minute as f64;
        self.tokens = (self.tokens + refill).min(per_minute as f64);
        self.at_ms = self.at_ms.max(now_ms);
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// One process's buckets. Holds one entry per identity that ever called:
/// identities come from the configuration and the enrollment, not from
/// the guest, so the map cannot be grown by a script.
#[derive(Default)]
pub struct LocalRate {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimits for LocalRate {
    fn take(&self, identity: &str, per_minute: u32, now_ms: i64) -> Result<bool, RateUnavailable> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        Ok(buckets
            .entry(identity.to_string())
            .or_insert_with(|| Bucket::full(per_minute, now_ms))
            .take(per_minute, now_ms))
    }
}
