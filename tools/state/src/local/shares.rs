//! One process's places of executions, in memory.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

use airlock_gateway::{rate::RateUnavailable, shares::ExecutionShares};

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
