//! One process's rate buckets, in memory.

use std::sync::Mutex;

use airlock_gateway::rate::{Bucket, RateLimits, RateUnavailable, Swept, REFILLED_AFTER_MS};

/// One process's buckets: one per identity that called within the last
/// [`REFILLED_AFTER_MS`], plus at most as many again between sweeps.
pub struct LocalRate {
    buckets: Mutex<Swept<Bucket>>,
}

impl Default for LocalRate {
    fn default() -> Self {
        Self {
            buckets: Mutex::new(Swept::new()),
        }
    }
}

impl LocalRate {
    /// Identities with a bucket kept (for tests and metrics).
    pub fn tracked(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }
}

impl RateLimits for LocalRate {
    fn take(&self, identity: &str, per_minute: u32, now_ms: i64) -> Result<bool, RateUnavailable> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.map.contains_key(identity) {
            buckets.make_room(now_ms, |b| {
                now_ms.saturating_sub(b.at_ms) < REFILLED_AFTER_MS
            });
        }
        Ok(buckets
            .map
            .entry(identity.to_string())
            .or_insert_with(|| Bucket::full(per_minute, now_ms))
            .take(per_minute, now_ms))
    }
}

#[cfg(test)]
mod bounded {
    use super::*;
    use airlock_gateway::rate::SWEEP_FROM;

    /// 100,000 identities, each calling once: what stays is what still
    /// matters, and a bucket forgotten answers as the one it replaced.
    #[test]
    fn buckets_of_identities_gone_quiet_are_forgotten() {
        let rate = LocalRate::default();
        let t0 = 1_000_000;
        for i in 0..100_000 {
            assert!(rate.take(&format!("user-{i}"), 60, t0 + i / 10).unwrap());
        }
        // All within the minute: all still matter (none is full yet).
        assert_eq!(rate.tracked(), 100_000);
        // A minute on, the next newcomer sweeps them out.
        let later = t0 + 10_000 + REFILLED_AFTER_MS;
        assert!(rate.take("newcomer", 60, later).unwrap());
        assert_eq!(rate.tracked(), 1);
        // An identity that emptied its bucket is not forgotten early.
        let busy = LocalRate::default();
        for _ in 0..2 {
            assert!(busy.take("busy", 2, later).unwrap());
        }
        assert!(!busy.take("busy", 2, later).unwrap());
        for i in 0..(SWEEP_FROM as i64 * 3) {
            busy.take(&format!("u{i}"), 2, later + 1_000 + i).unwrap();
        }
        assert!(!busy.take("busy", 2, later + 1_000).unwrap(), "still empty");
        assert!(busy.tracked() <= SWEEP_FROM * 4, "{}", busy.tracked());
    }
}
