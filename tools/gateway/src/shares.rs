//! `rate.executions_per_identity`: how many executions one identity may
//! have started and not ended across the whole deployment.
//!
//! Each replica already shares its own sandbox slots fairly between
//! identities (`[sandbox.capacity] executions_per_identity`); behind a
//! load balancer one identity could still hold that share on every
//! replica. With this set, every execution takes a place before it
//! starts and gives it back when it ends; the replicas of a deployment
//! count places in PostgreSQL (`state::postgres`), one process in memory.
//! A place is held until its execution ends, or at the latest
//! `rate.execution_hold_ms` after it was taken, so a replica that died
//! with executions running does not hold their places for good.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

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

/// One process's places: executions end in this process or the process
/// ends, so nothing here needs the time bound.
#[derive(Default)]
pub struct LocalShares {
    held: Mutex<HashMap<String, HashSet<String>>>,
}

impl LocalShares {
    /// Identities holding a place (for tests).
    pub fn identities(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl ExecutionShares for LocalShares {
    fn take(
        &self,
        identity: &str,
        execution: &str,
        max: u32,
        _now_ms: i64,
        _until_ms: i64,
    ) -> Result<bool, RateUnavailable> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mine = held.entry(identity.to_string()).or_default();
        if mine.len() >= max as usize {
            if mine.is_empty() {
                held.remove(identity);
            }
            return Ok(false);
        }
        mine.insert(execution.to_string());
        Ok(true)
    }

    fn give_back(&self, identity: &str, execution: &str) -> Result<(), RateUnavailable> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mine) = held.get_mut(identity) {
            mine.remove(execution);
            if mine.is_empty() {
                held.remove(identity);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_holds_at_most_its_places_and_forgets_them() {
        let s = LocalShares::default();
        assert!(s.take("rita", "e1", 2, 0, 1).unwrap());
        assert!(s.take("rita", "e2", 2, 0, 1).unwrap());
        assert!(!s.take("rita", "e3", 2, 0, 1).unwrap());
        assert!(s.take("olga", "e4", 2, 0, 1).unwrap(), "per identity");
        s.give_back("rita", "e1").unwrap();
        assert!(s.take("rita", "e3", 2, 0, 1).unwrap());
        for (who, e) in [("rita", "e2"), ("rita", "e3"), ("olga", "e4")] {
            s.give_back(who, e).unwrap();
        }
        assert_eq!(s.identities(), 0, "nothing kept for identities gone");
    }
}
