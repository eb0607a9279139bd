//! Durable executions parked in the deployment's state: an execution
//! whose every pending call waits for another person's decision stops
//! holding an instance and a slot, and keeps only a row — its script and
//! journal, sealed — until its identity follows it
//! (`execute({"execution": ID})`), on this replica, another one sharing
//! the database, or this one after a restart. Following resumes it by
//! replay: what it did is not done again, the calls it waited for are
//! sent again and find their decisions.
//!
//! A follow-up takes the row under a lease naming this process; a process
//! that dies mid-resume leaves its lease to run out, and the next taker
//! learns the row is an orphan: the calls it waited for may have been
//! sent by the dead one, and each whose approval was used answers
//! `outcome_unknown` instead of being sent again (see `ClientTools`).
//!
//! The body is sealed with a key derived from the deployment's approval
//! secret and bound to the execution, its identity and its birth: a row
//! edited or moved in the store is refused, and its execution ends,
//! before anything of it runs. Only the identity that ran an execution
//! can follow it; another identity's id answers exactly as an unknown
//! one does.

use std::{
    sync::{Arc, OnceLock},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use airlock_gateway::{
    parked::{ParkCaps, ParkRefusal, ParkedInfo, ParkedRow, ParkedStore, Take},
    Gateway,
};
use airlock_sandbox::{Journal, Waiting};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Parked executions one identity may have at once across the
/// deployment (resumed ones being run count too): past it, the execution
/// that would park ends as it did before executions could wait
/// (`ApprovalRequired`).
pub const PARKED_PER_IDENTITY: usize = 32;

/// Parked executions in the deployment at once.
pub const PARKED_TOTAL: usize = 1000;

/// Bytes (script and journal, as `journal_bytes` counts them) one
/// identity's parked executions may hold together: a script can fill its
/// journal with clock readings before it waits, and 32 full ones would be
/// 1 GiB.
pub const PARKED_BYTES_PER_IDENTITY: u64 = 64 * 1024 * 1024;

/// Bytes all parked executions of the deployment may hold.
pub const PARKED_BYTES_TOTAL: u64 = 512 * 1024 * 1024;

/// How long a parked execution waits, from its first start, before it is
/// ended (its approval requests expire sooner by default).
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// How long past the wall-time limit a follow-up holds an execution it
/// took: the follow-up's own wait for a decision, a queue for a slot, and
/// writing its lines. Past the lease another replica may take it.
pub const LEASE_MARGIN: Duration = Duration::from_secs(120);

const CAPS: ParkCaps = ParkCaps {
    per_identity: PARKED_PER_IDENTITY as u32,
    total: PARKED_TOTAL as u32,
    bytes_per_identity: PARKED_BYTES_PER_IDENTITY as i64,
    bytes_total: PARKED_BYTES_TOTAL as i64,
};

/// The approval questions one execution has put to the person in a
/// 2026-07-28 client, across its parks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prompts {
    pub asked: u32,
    pub declined: bool,
}

/// One execution waiting for decisions.
#[derive(Clone, Debug)]
pub struct Parked {
    pub identity: String,
    pub script: String,
    pub journal: Journal,
    pub waiting: Vec<Waiting>,
    /// Tool calls it made so far, its replays not counted twice.
    pub calls: u32,
    /// When it first started (ms since the epoch), for [`LIFETIME`].
    pub born_ms: i64,
    pub prompts: Prompts,
}

/// A parked execution a follow-up took.
pub struct Taken {
    pub parked: Parked,
    /// A process that took it before died mid-resume.
    pub orphan: bool,
}

/// Why an execution could not park.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParkError {
    #[error("limit `durable.parked_per_identity` ({PARKED_PER_IDENTITY}): identity {0} already has that many executions waiting for decisions; follow or let them end first")]
    PerIdentity(String),
    #[error("limit `durable.parked_total` ({PARKED_TOTAL}): this deployment holds that many executions waiting for decisions")]
    Total,
    #[error("limit `durable.parked_bytes_per_identity` ({PARKED_BYTES_PER_IDENTITY} bytes): the journals of identity {0}'s waiting executions would pass it; take narrower results before waiting, or follow the others first")]
    BytesPerIdentity(String),
    #[error("limit `durable.parked_bytes_total` ({PARKED_BYTES_TOTAL} bytes): the journals of the executions waiting in this deployment would pass it")]
    BytesTotal,
    #[error("this server held the execution longer than its lease and another took it over; that one goes on with it")]
    LeaseLost,
    #[error("the store of parked executions cannot be reached, so the execution cannot wait: {0}")]
    Unavailable(String),
}

/// Why a follow-up finds nothing to resume.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FollowError {
    #[error("no execution {0} of yours is waiting: it ended, outlived its lifetime, was cancelled, or was never parked; run the script again with `script`")]
    Unknown(String),
    #[error("execution {0} is being resumed or parked by another request right now; follow it again once that one answers")]
    Running(String),
    #[error("execution {0} was altered in the store (its seal does not match), so none of it runs again; it is ended. Run the script again with `script`")]
    Tampered(String),
    #[error("the store of parked executions cannot be reached, so execution {0} cannot be followed now; try again shortly")]
    Unavailable(String),
}

/// What the seal covers besides the row's keys.
#[derive(Serialize, Deserialize)]
struct Body {
    script: String,
    journal: Journal,
    waiting: Vec<Waiting>,
}

pub struct Durable {
    gateway: Arc<Gateway>,
    store: Arc<dyn ParkedStore>,
    /// This process, as the holder of the executions it resumes.
    holder: String,
    lease: Duration,
    key: OnceLock<[u8; 32]>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Durable {
    /// Parks in `gateway`'s state; a follow-up holds what it takes for
    /// `wall_time` (the execution's limit) and [`LEASE_MARGIN`].
    pub fn new(gateway: Arc<Gateway>, wall_time: Duration) -> Self {
        let mut holder = [0u8; 8];
        let _ = getrandom::fill(&mut holder);
        Self {
            store: gateway.state().parked.clone(),
            gateway,
            holder: hex::encode(holder),
            lease: crate::mcp::FOLLOW_WAIT + wall_time + LEASE_MARGIN,
            key: OnceLock::new(),
        }
    }

    /// The sealing key: derived from the deployment's approval secret,
    /// which every replica shares and nobody outside its state reads.
    fn key(&self) -> Result<[u8; 32], String> {
        if let Some(k) = self.key.get() {
            return Ok(*k);
        }
        let secret = self
            .gateway
            .approvals()
            .summary_key()
            .map_err(|e| e.to_string())?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret).expect("HMAC takes any key");
        // No other use of the secret hashes input that starts with NUL
        // and this label.
        mac.update(b"\0airlock parked execution v1");
        let key: [u8; 32] = mac.finalize().into_bytes().into();
        Ok(*self.key.get_or_init(|| key))
    }

    fn mac(
        &self,
        execution: &str,
        identity: &str,
        born_ms: i64,
        json: &str,
    ) -> Result<Hmac<Sha256>, String> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key()?).expect("HMAC takes any key");
        for part in [execution, identity, &born_ms.to_string(), json] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        Ok(mac)
    }

    fn seal(&self, execution: &str, p: &Parked) -> Result<String, String> {
        let json = serde_json::to_string(&Body {
            script: p.script.clone(),
            journal: p.journal.clone(),
            waiting: p.waiting.clone(),
        })
        .map_err(|e| e.to_string())?;
        let tag = self
            .mac(execution, &p.identity, p.born_ms, &json)?
            .finalize()
            .into_bytes();
        Ok(format!("v1.{}.{json}", hex::encode(tag)))
    }

    /// The body of `row`, if its seal holds.
    fn open(&self, row: &ParkedRow) -> Result<Body, String> {
        let rest = row.body.strip_prefix("v1.").ok_or("not a v1 body")?;
        let (tag, json) = rest.split_once('.').ok_or("no seal")?;
        let tag = hex::decode(tag).map_err(|_| "a seal that is not hex")?;
        self.mac(&row.execution, &row.identity, row.born_ms, json)?
            .verify_slice(&tag)
            .map_err(|_| "the seal does not match".to_string())?;
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    /// Keeps `parked` under `execution` within the caps, not to be
    /// followed before [`Durable::ready`] (once its parked line is
    /// written). `resumed`: this process holds its row (it was followed)
    /// and parks it again.
    pub fn park(&self, execution: &str, parked: &Parked, resumed: bool) -> Result<(), ParkError> {
        let body = self
            .seal(execution, parked)
            .map_err(ParkError::Unavailable)?;
        let row = ParkedRow {
            execution: execution.to_string(),
            identity: parked.identity.clone(),
            born_ms: parked.born_ms,
            bytes: (parked.journal.bytes() + parked.script.len() as u64).min(i64::MAX as u64)
                as i64,
            waiting: request_ids(&parked.waiting),
            body,
            asked: parked.prompts.asked,
            declined: parked.prompts.declined,
            calls: parked.calls,
        };
        let holder = resumed.then_some(self.holder.as_str());
        let kept = self
            .store
            .park(&row, holder, &CAPS, now_ms())
            .map_err(|e| ParkError::Unavailable(e.to_string()))?;
        self.counted();
        kept.map_err(|refused| match refused {
            ParkRefusal::PerIdentity => ParkError::PerIdentity(parked.identity.clone()),
            ParkRefusal::Total => ParkError::Total,
            ParkRefusal::BytesPerIdentity => ParkError::BytesPerIdentity(parked.identity.clone()),
            ParkRefusal::BytesTotal => ParkError::BytesTotal,
            ParkRefusal::LeaseLost => ParkError::LeaseLost,
        })
    }

    /// Its parked line is written: its identity may follow it now.
    pub fn ready(&self, execution: &str) {
        if let Err(e) = self.store.ready(execution) {
            tracing::warn!(execution, error = %e, "a parked execution could not be made ready to follow; it ends when its lifetime does");
        }
    }

    /// Takes `execution` out to resume it, if `identity` parked it; held
    /// by this process until it parks again, ends, or is put back.
    pub fn take(&self, execution: &str, identity: &str) -> Result<Taken, FollowError> {
        let now = now_ms();
        let until = now.saturating_add(self.lease.as_millis().min(i64::MAX as u128) as i64);
        let taken = self
            .store
            .take(execution, identity, &self.holder, now, until)
            .map_err(|e| {
                tracing::warn!(execution, error = %e, "a parked execution could not be taken");
                FollowError::Unavailable(execution.to_string())
            })?;
        let (row, orphan) = match taken {
            Take::Taken { row, orphan } => (row, orphan),
            Take::Busy => return Err(FollowError::Running(execution.to_string())),
            Take::Unknown => return Err(FollowError::Unknown(execution.to_string())),
        };
        match self.open(&row) {
            Ok(body) => Ok(Taken {
                parked: Parked {
                    identity: row.identity,
                    script: body.script,
                    journal: body.journal,
                    waiting: body.waiting,
                    calls: row.calls,
                    born_ms: row.born_ms,
                    prompts: Prompts {
                        asked: row.asked,
                        declined: row.declined,
                    },
                },
                orphan,
            }),
            Err(why) => {
                tracing::warn!(
                    execution,
                    why,
                    "a parked execution's seal does not hold; it is ended"
                );
                self.ended(execution);
                Err(FollowError::Tampered(execution.to_string()))
            }
        }
    }

    /// Puts back an execution a follow-up took and did not run (nothing
    /// was decided yet, or it could not start): the row as it was.
    pub fn put_back(&self, execution: &str) {
        if let Err(e) = self.store.put_back(execution, &self.holder) {
            tracing::warn!(execution, error = %e, "a parked execution could not be put back; it can be followed again once its lease ends");
        }
    }

    /// The approval requests `identity`'s parked `execution` waits for
    /// (`None`: no such execution of theirs is waiting).
    pub fn waiting_requests(&self, execution: &str, identity: &str) -> Option<Vec<String>> {
        let row = self.store.get(execution, identity, now_ms()).ok()??;
        Some(row.waiting)
    }

    /// The questions put to the person about `execution` so far.
    pub fn prompts(&self, execution: &str, identity: &str) -> Prompts {
        match self.store.get(execution, identity, now_ms()) {
            Ok(Some(row)) => Prompts {
                asked: row.asked,
                declined: row.declined,
            },
            _ => Prompts::default(),
        }
    }

    /// Counts a question put, or a decline, for `execution`.
    pub fn prompted(&self, execution: &str, asked: u32, declined: bool) {
        if let Err(e) = self.store.prompted(execution, asked, declined) {
            tracing::warn!(execution, error = %e, "a question put could not be counted");
        }
    }

    /// An execution this process ran or resumed ended: its row, if any,
    /// goes.
    pub fn ended(&self, execution: &str) {
        if let Err(e) = self.store.ended(execution, &self.holder) {
            tracing::warn!(execution, error = %e, "an ended execution's row could not be removed; it goes when its lifetime ends");
        }
        self.counted();
    }

    /// Takes out the executions past [`LIFETIME`], for their end lines.
    pub fn expired(&self) -> Vec<ParkedInfo> {
        let now = now_ms();
        let before = now.saturating_sub(LIFETIME.as_millis() as i64);
        let gone = self.store.expired(before, now).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "parked executions past their lifetime could not be read");
            Vec::new()
        });
        self.counted();
        gone
    }

    /// Tells the metrics how many are parked in the deployment now.
    fn counted(&self) {
        if let Ok(n) = self.store.count() {
            crate::metrics::global().parked(n as usize);
        }
    }
}

/// The approval requests waiting calls name.
pub fn request_ids(waiting: &[Waiting]) -> Vec<String> {
    waiting
        .iter()
        .filter_map(|w| w.details.get("request_id")?.as_str().map(str::to_string))
        .collect()
}

/// How long ago `born_ms` was.
pub fn since(born_ms: i64) -> Duration {
    Duration::from_millis(now_ms().saturating_sub(born_ms).max(0) as u64)
}

/// Now, in ms since the epoch, for an execution's birth.
pub fn born_now() -> i64 {
    now_ms()
}
