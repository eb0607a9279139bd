//! `rate.calls_per_minute`: a token bucket per identity, `per_minute`
//! tokens, refilled continuously by the gateway's clock (so tests can
//! move it). One process keeps its buckets in memory; the replicas of a
//! deployment share them in PostgreSQL (both stores in `airlock-state`),
//! so the limit holds for the deployment, not per replica. [`Swept`] is
//! the bounded map both the memory store and the gateway keep counts in.

use std::collections::HashMap;

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

/// A bucket untouched this long is full again whatever it held, and so
/// the same as no bucket: it can be forgotten (and its row deleted).
pub const REFILLED_AFTER_MS: i64 = 60_000;

/// Identities are many once they come from an OpenID provider: past this
/// many entries a map keyed by identity sweeps out what it no longer
/// needs before it grows further.
pub const SWEEP_FROM: usize = 1024;

/// A map keyed by identity that sweeps itself before a new key goes in:
/// when the key would take it past its mark (then the mark moves to twice
/// what is left, at least [`SWEEP_FROM`], so sweeps cost O(1) per
/// insertion over time), and at most once a [`REFILLED_AFTER_MS`] while
/// it holds more than [`SWEEP_FROM`] (so a crowd that came and went does
/// not stay until another as large comes).
pub struct Swept<V> {
    pub map: HashMap<String, V>,
    mark: usize,
    swept_ms: i64,
}

impl<V> Swept<V> {
    pub fn new() -> Self {
        Self {
            map: HashMap::new(),
            mark: SWEEP_FROM,
            swept_ms: i64::MIN,
        }
    }

    /// Before a new key goes in at `now_ms`: keeps only what `keep` says,
    /// when a sweep is due.
    pub fn make_room(&mut self, now_ms: i64, keep: impl FnMut(&V) -> bool) {
        drop(self.make_room_taking(now_ms, keep));
    }
}

impl<V> Swept<V> {
    /// As [`Swept::make_room`], handing back what the sweep removed (for
    /// maps whose entries must not vanish unrecorded).
    pub fn make_room_taking(
        &mut self,
        now_ms: i64,
        mut keep: impl FnMut(&V) -> bool,
    ) -> Vec<(String, V)> {
        let len = self.map.len();
        let due = len >= self.mark
            || (len > SWEEP_FROM && now_ms.saturating_sub(self.swept_ms) >= REFILLED_AFTER_MS);
        if !due {
            return Vec::new();
        }
        let gone: Vec<(String, V)> = self.map.extract_if(|_, v| !keep(v)).collect();
        self.map.shrink_to_fit();
        self.mark = (self.map.len() * 2).max(SWEEP_FROM);
        self.swept_ms = now_ms;
        gone
    }
}

impl<V> Default for Swept<V> {
    fn default() -> Self {
        Self::new()
    }
}
