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
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use airlock_sandbox::{Journal, Waiting};

/// Parked executions one identity may have at once (resumed ones being
/// run count too): past it, the execution that would park ends as it did
/// before executions could wait (`ApprovalRequired`).
pub const PARKED_PER_IDENTITY: usize = 32;

/// Parked executions on this process at once.
pub const PARKED_TOTAL: usize = 1000;

/// Journal bytes (as `journal_bytes` counts them) one identity's parked
/// executions may hold together: a script can fill its journal with
/// clock readings before it waits, and 32 full ones would be 1 GiB.
pub const PARKED_BYTES_PER_IDENTITY: u64 = 64 * 1024 * 1024;

/// Journal bytes all parked executions on this process may hold.
pub const PARKED_BYTES_TOTAL: u64 = 512 * 1024 * 1024;

/// How long a parked execution waits, from its first start, before it is
/// ended (its approval requests expire sooner by default).
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The approval questions one execution has put to the person in a
/// 2026-07-28 client, across its parks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prompts {
    pub asked: u32,
    pub declined: bool,
}

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
    pub prompts: Prompts,
}

/// Why an execution could not park.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParkError {
    #[error("limit `durable.parked_per_identity` ({PARKED_PER_IDENTITY}): identity {0} already has that many executions waiting for decisions; follow or let them end first")]
    PerIdentity(String),
    #[error("limit `durable.parked_total` ({PARKED_TOTAL}): this server holds that many executions waiting for decisions")]
    Total,
    #[error("limit `durable.parked_bytes_per_identity` ({PARKED_BYTES_PER_IDENTITY} bytes): the journals of identity {0}'s waiting executions would pass it; take narrower results before waiting, or follow the others first")]
    BytesPerIdentity(String),
    #[error("limit `durable.parked_bytes_total` ({PARKED_BYTES_TOTAL} bytes): the journals of the executions waiting on this server would pass it")]
    BytesTotal,
}

/// Why a follow-up finds nothing to resume.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FollowError {
    #[error("no execution {0} of yours is waiting here: it ended, outlived its lifetime, was never parked, or this server restarted since (its approval requests stay open); run the script again with `script`")]
    Unknown(String),
    #[error("execution {0} is being resumed or parked by another request right now; follow it again once that one answers")]
    Running(String),
}

#[derive(Default)]
pub struct Durable {
    parked: Mutex<Registry>,
}

struct Held {
    parked: Parked,
    /// Its parked line is written: it may be followed.
    ready: bool,
}

#[derive(Default)]
struct Registry {
    waiting: HashMap<String, Held>,
    /// Taken by a follow-up and not yet parked again or ended, with
    /// whose it is.
    running: HashMap<String, String>,
}

impl Registry {
    /// Tells the metrics how many wait now.
    fn counted(&self) {
        crate::metrics::global().parked(self.waiting.len());
    }

    fn bytes(&self, identity: Option<&str>) -> u64 {
        self.waiting
            .values()
            .filter(|h| identity.is_none_or(|i| h.parked.identity == i))
            .map(|h| h.parked.journal.bytes())
            .sum()
    }
}

impl Durable {
    /// Keeps `parked` under `execution`, within the caps, not to be
    /// followed before [`Durable::ready`] (once its parked line is
    /// written). Refused past a cap, handing `parked` back.
    pub fn park(&self, execution: &str, parked: Parked) -> Result<(), Box<(ParkError, Parked)>> {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        // A resumed execution parking again gives up its running place.
        reg.running.remove(execution);
        let refuse = |e: ParkError, parked: Parked| Err(Box::new((e, parked)));
        if reg.waiting.len() + reg.running.len() >= PARKED_TOTAL {
            return refuse(ParkError::Total, parked);
        }
        let identity = parked.identity.clone();
        let own = reg
            .waiting
            .values()
            .filter(|h| h.parked.identity == identity)
            .count()
            + reg.running.values().filter(|i| **i == identity).count();
        if own >= PARKED_PER_IDENTITY {
            return refuse(ParkError::PerIdentity(identity), parked);
        }
        let bytes = parked.journal.bytes();
        if reg.bytes(Some(&identity)) + bytes > PARKED_BYTES_PER_IDENTITY {
            return refuse(ParkError::BytesPerIdentity(identity), parked);
        }
        if reg.bytes(None) + bytes > PARKED_BYTES_TOTAL {
            return refuse(ParkError::BytesTotal, parked);
        }
        let mut parked = parked;
        parked.journal.entries.shrink_to_fit();
        reg.waiting.insert(
            execution.to_string(),
            Held {
                parked,
                ready: false,
            },
        );
        reg.counted();
        Ok(())
    }

    /// Its parked line is written: its identity may follow it now.
    pub fn ready(&self, execution: &str) {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = reg.waiting.get_mut(execution) {
            h.ready = true;
        }
    }

    /// Puts back an execution a follow-up took and did not run (nothing
    /// was decided yet, or it could not start): it keeps the place it
    /// held, whatever the caps say now.
    pub fn put_back(&self, execution: &str, parked: Parked) {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        reg.running.remove(execution);
        reg.waiting.insert(
            execution.to_string(),
            Held {
                parked,
                ready: true,
            },
        );
        reg.counted();
    }

    /// Takes `execution` out to resume it, if `identity` parked it.
    pub fn take(&self, execution: &str, identity: &str) -> Result<Parked, FollowError> {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        let unknown = || Err(FollowError::Unknown(execution.to_string()));
        match reg.waiting.get(execution) {
            Some(h) if h.parked.identity == identity && h.ready => {
                let held = reg.waiting.remove(execution).expect("just found");
                reg.counted();
                reg.running
                    .insert(execution.to_string(), identity.to_string());
                Ok(held.parked)
            }
            Some(h) if h.parked.identity == identity => {
                Err(FollowError::Running(execution.to_string()))
            }
            // Another identity's, waiting or running: the same answer as
            // none, so ids tell nobody what others run or when.
            Some(_) => unknown(),
            None if reg.running.get(execution).map(String::as_str) == Some(identity) => {
                Err(FollowError::Running(execution.to_string()))
            }
            None => unknown(),
        }
    }

    /// The approval requests `identity`'s parked `execution` waits for
    /// (`None`: no such execution of theirs is waiting).
    pub fn waiting_requests(&self, execution: &str, identity: &str) -> Option<Vec<String>> {
        let reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        let h = reg.waiting.get(execution)?;
        (h.ready && h.parked.identity == identity).then(|| {
            h.parked
                .waiting
                .iter()
                .filter_map(|w| w.details.get("request_id")?.as_str().map(str::to_string))
                .collect()
        })
    }

    /// The questions put to the person about `execution` so far.
    pub fn prompts(&self, execution: &str) -> Prompts {
        let reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        reg.waiting
            .get(execution)
            .map(|h| h.parked.prompts)
            .unwrap_or_default()
    }

    /// Counts a question put, or a decline, for `execution`.
    pub fn prompted(&self, execution: &str, asked: u32, declined: bool) {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = reg.waiting.get_mut(execution) {
            h.parked.prompts.asked += asked;
            h.parked.prompts.declined |= declined;
        }
    }

    /// A resumed execution ended.
    pub fn ended(&self, execution: &str) {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        reg.running.remove(execution);
    }

    /// Takes out the executions past [`LIFETIME`], for their end lines.
    pub fn expired(&self) -> Vec<(String, Parked)> {
        self.take_where(|h| h.ready && h.parked.born.elapsed() >= LIFETIME)
    }

    /// Takes out every parked execution (the server stops: this process
    /// holds them, and they end with it).
    pub fn all(&self) -> Vec<(String, Parked)> {
        self.take_where(|_| true)
    }

    fn take_where(&self, f: impl Fn(&Held) -> bool) -> Vec<(String, Parked)> {
        let mut reg = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<String> = reg
            .waiting
            .iter()
            .filter(|(_, h)| f(h))
            .map(|(id, _)| id.clone())
            .collect();
        let taken = ids
            .into_iter()
            .filter_map(|id| reg.waiting.remove(&id).map(|h| (id, h.parked)))
            .collect();
        reg.counted();
        taken
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
            prompts: Prompts::default(),
        }
    }

    #[test]
    fn only_its_identity_follows_an_execution_and_others_learn_nothing() {
        let d = Durable::default();
        d.park("r1-x1", parked("alice"))
            .map_err(|e| e.0.clone())
            .unwrap();
        assert_eq!(
            d.take("r1-x1", "alice").err(),
            Some(FollowError::Running("r1-x1".into())),
            "not before its parked line is written"
        );
        d.ready("r1-x1");
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
        assert_eq!(
            d.take("r1-x1", "bob").err(),
            Some(FollowError::Unknown("r1-x1".into())),
            "that it runs is alice's to know"
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
        // One being resumed keeps its place: its parking again is not
        // refused, and nobody takes the place meanwhile.
        d.ready("x0");
        let resumed = d.take("x0", "alice").unwrap();
        assert!(d.park("one-more", parked("alice")).is_err());
        d.park("x0", resumed).map_err(|e| e.0.clone()).unwrap();
    }

    #[test]
    fn parked_journals_are_bounded_in_bytes_per_identity() {
        let d = Durable::default();
        let heavy = |identity: &str| {
            let mut p = parked(identity);
            let payload = "x".repeat(1 << 20);
            p.journal.entries = (0..20)
                .map(|id| airlock_sandbox::Entry::Done {
                    id,
                    status: 0,
                    payload: payload.clone(),
                })
                .collect();
            p
        };
        for n in 0..3 {
            d.park(&format!("h{n}"), heavy("alice"))
                .map_err(|e| e.0.clone())
                .unwrap();
        }
        let (e, _) = *d.park("h3", heavy("alice")).err().unwrap();
        assert_eq!(e, ParkError::BytesPerIdentity("alice".into()));
        assert!(e.to_string().contains("durable.parked_bytes_per_identity"));
        d.park("b0", heavy("bob")).map_err(|e| e.0.clone()).unwrap();
    }
}
