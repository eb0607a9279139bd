//! Durable executions parked on this process: an execution whose every
//! pending call waits for another person's decision stops holding an
//! instance and a slot, and keeps only its script and journal here until
//! its identity follows it (`execute({"execution": ID})`). Following
//! resumes it by replay: what it did is not done again, the calls it
//! waited for are sent again and find their decisions.
//!
//! This first step keeps parked executions in this process's memory: a
//! restart forgets them (their approval requests stay open), and a
//! follow-up must reach the replica that parked it. Only the identity
//! that ran an execution can follow it; another identity's id answers
//! exactly as an unknown one does.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::{Duration, Instant},
};

use airlock_sandbox::{Journal, Waiting};

/// Parked executions one identity may have at once: past it, the
/// execution that would park ends as it did before durable executions
/// (`ApprovalRequired`).
pub const PARKED_PER_IDENTITY: usize = 32;

/// Parked executions on this process at once.
pub const PARKED_TOTAL: usize = 1000;

/// How long a parked execution waits, from its first start, before it is
/// ended (its approval requests expire sooner by default).
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// One execution waiting for decisions.
pub struct Parked {
    pub identity: String,
    pub script: String,
    pub journal: Journal,
    pub waiting: Vec<Waiting>,
    /// Tool calls it made so far, its replays not counted twice.
    pub calls: u32,
    /// When it first started, for [`LIFETIME`].
    pub born: Instant,
}

/// Why an execution could not park.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParkError {
    #[error("limit `durable.parked_per_identity` ({PARKED_PER_IDENTITY}): identity {0} already has that many executions waiting for decisions; follow or let them end first")]
    PerIdentity(String),
    #[error("limit `durable.parked_total` ({PARKED_TOTAL}): this server holds that many executions waiting for decisions")]
    Total,
}

/// Why a follow-up finds nothing to resume.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FollowError {
    #[error("no execution {0} of yours is waiting here: it ended, outlived its lifetime, was never parked, or this server restarted since (its approval requests stay open); run the script again with `script`")]
    Unknown(String),
    #[error("execution {0} is being resumed by another request right now; follow it again once that one answers")]
    Running(String),
}

#[derive(Default)]
pub struct Durable {
    parked: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    waiting: HashMap<String, Parked>,
    /// Taken by a follow-up and not yet parked again or ended.
    running: HashSet<String>,
}

impl Durable {
    /// Keeps `parked` under `execution` until its identity follows it.
    /// Refused past a cap, handing `parked` back.
    pub fn park(&self, execution: &str, parked: Parked) -> Result<(), Box<(ParkError, Parked)>> {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        reg.running.remove(execution);
        if reg.waiting.len() >= PARKED_TOTAL {
            return Err(Box::new((ParkError::Total, parked)));
        }
        let own = reg
            .waiting
            .values()
            .filter(|p| p.identity == parked.identity)
            .count();
        if own >= PARKED_PER_IDENTITY {
            return Err(Box::new((
                ParkError::PerIdentity(parked.identity.clone()),
                parked,
            )));
        }
        reg.waiting.insert(execution.to_string(), parked);
        Ok(())
    }

    /// Takes `execution` out to resume it, if `identity` parked it.
    pub fn take(&self, execution: &str, identity: &str) -> Result<Parked, FollowError> {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        match reg.waiting.get(execution) {
            Some(p) if p.identity == identity => {
                let parked = reg.waiting.remove(execution).expect("just found");
                reg.running.insert(execution.to_string());
                Ok(parked)
            }
            // Another identity's: the same answer as none, so ids tell
            // nobody what others run.
            Some(_) => Err(FollowError::Unknown(execution.to_string())),
            None if reg.running.contains(execution) => {
                Err(FollowError::Running(execution.to_string()))
            }
            None => Err(FollowError::Unknown(execution.to_string())),
        }
    }

    /// A resumed execution ended (or could not be parked again).
    pub fn ended(&self, execution: &str) {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        reg.running.remove(execution);
    }

    /// Takes out the executions past [`LIFETIME`], for their end lines.
    pub fn expired(&self) -> Vec<(String, Parked)> {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        let old: Vec<String> = reg
            .waiting
            .iter()
            .filter(|(_, p)| p.born.elapsed() >= LIFETIME)
            .map(|(id, _)| id.clone())
            .collect();
        old.into_iter()
            .filter_map(|id| reg.waiting.remove(&id).map(|p| (id, p)))
            .collect()
    }

    /// Executions parked here now.
    pub fn parked(&self) -> usize {
        self.parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiting
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parked(identity: &str) -> Parked {
        Parked {
            identity: identity.into(),
            script: "1".into(),
            journal: Journal::new(),
            waiting: vec![],
            calls: 0,
            born: Instant::now(),
        }
    }

    #[test]
    fn only_its_identity_follows_an_execution_and_others_learn_nothing() {
        let d = Durable::default();
        d.park("r1-x1", parked("alice"))
            .map_err(|e| e.0.clone())
            .unwrap();
        let foreign = d.take("r1-x1", "bob").err().unwrap();
        let unknown = d.take("r1-x9", "bob").err().unwrap();
        assert_eq!(
            foreign.to_string().replace("r1-x1", "ID"),
            unknown.to_string().replace("r1-x9", "ID"),
            "another identity's id reads as an unknown one"
        );
        assert_eq!(d.take("r1-x1", "alice").unwrap().identity, "alice");
        assert_eq!(
            d.take("r1-x1", "alice").err(),
            Some(FollowError::Running("r1-x1".into()))
        );
        d.ended("r1-x1");
        assert_eq!(
            d.take("r1-x1", "alice").err(),
            Some(FollowError::Unknown("r1-x1".into()))
        );
    }

    #[test]
    fn parking_is_capped_per_identity_with_the_limit_named() {
        let d = Durable::default();
        for n in 0..PARKED_PER_IDENTITY {
            d.park(&format!("x{n}"), parked("alice"))
                .map_err(|e| e.0.clone())
                .unwrap();
        }
        let (e, back) = *d.park("one-more", parked("alice")).err().unwrap();
        assert!(e.to_string().contains("durable.parked_per_identity"), "{e}");
        assert_eq!(back.identity, "alice", "handed back, not lost");
        d.park("bobs", parked("bob"))
            .map_err(|e| e.0.clone())
            .unwrap();
        assert_eq!(d.parked(), PARKED_PER_IDENTITY + 1);
    }
}
