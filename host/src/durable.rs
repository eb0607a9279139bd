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
//! The body (script and journal, which holds tool results) is encrypted
//! and sealed (ChaCha20-Poly1305) with a key derived from the
//! deployment's approval secret, bound to the execution, its identity and
//! its birth: a copy of the store shows no tool result, and a body edited
//! or moved to another row is refused, its execution ended, before
//! anything of it runs. (Whoever can read the approval secret — the
//! replicas' own database role, or this user on one machine — is the
//! deployment, and can forge a body.) Only the identity that ran an
//! execution can follow it; another identity's id answers exactly as an
//! unknown one does.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use airlock_gateway::{
    parked::{ParkCaps, ParkRefusal, ParkedInfo, ParkedRow, ParkedStore, Take},
    Gateway,
};
use std::collections::{BTreeMap, BTreeSet};

use airlock_sandbox::{Journal, Limits, Waiting};
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Record bytes one run of an execution may write (each record is the
/// sealed journal, so a run that makes many changes after taking large
/// results writes its journal many times).
pub const RECORD_BYTES: u64 = 128 * 1024 * 1024;

/// Longest a follow-up waits for a decision before it answers that the
/// execution still waits: well inside the 60 s clients give a request.
pub const FOLLOW_WAIT: Duration = Duration::from_secs(10);

/// Parked executions one identity may have at once across the
/// deployment (resumed ones being run count too): past it, the execution
/// that would park ends as it did before executions could wait
/// (`ApprovalRequired`).
pub const PARKED_PER_IDENTITY: usize = 32;

/// Parked executions in the deployment at once.
pub const PARKED_TOTAL: usize = 1000;

/// Bytes (sealed script and journal, as stored) one identity's parked
/// executions may hold together: a script can fill its
/// journal with clock readings before it waits, and 32 full ones would be
/// 1 GiB.
pub const PARKED_BYTES_PER_IDENTITY: u64 = 64 * 1024 * 1024;

/// Bytes all parked executions of the deployment may hold.
pub const PARKED_BYTES_TOTAL: u64 = 512 * 1024 * 1024;

/// How long past the wall-time limit, the queue wait and the follow-up's
/// own wait for a decision a follow-up holds an execution it took
/// (writing its lines, a slow store). Past the lease another replica may
/// take it; replicas' clocks are assumed within this of each other.
pub const LEASE_MARGIN: Duration = Duration::from_secs(120);

const CAPS: ParkCaps = ParkCaps {
    per_identity: PARKED_PER_IDENTITY as u32,
    total: PARKED_TOTAL as u32,
    bytes_per_identity: PARKED_BYTES_PER_IDENTITY as i64,
    bytes_total: PARKED_BYTES_TOTAL as i64,
};

/// The approval questions one execution has put to the person in its
/// client, across its parks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prompts {
    pub asked: u32,
    /// The person declined a request of this execution, or dismissed a
    /// question without a choice: they are not asked again in it.
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
    /// When it first started (ms since the epoch), for `lifetime_ms`.
    pub born_ms: i64,
    pub prompts: Prompts,
    /// Parks in a row that took no new answer (a read still running each
    /// time the answer was due), for [`MAX_IDLE_PARKS`].
    pub idle: u32,
    /// What it sent and was answered, as of its last record (see
    /// `crate::checkpoints`).
    pub sends: Sends,
}

/// The changes of a journaled execution that crossed to the backend, as
/// its last record in the store says: written before each is sent and
/// again once its answer is in, so the record always tells which changes
/// a process that died may have sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sends {
    /// Every change of this execution was recorded before it was sent
    /// (false for a row an older version parked: then nothing tells what a
    /// dead holder sent past its last wait).
    #[serde(default)]
    pub recorded: bool,
    /// Changes that may have been sent, with no answer recorded: each is
    /// `outcome_unknown` to a replay.
    #[serde(default)]
    pub unanswered: BTreeSet<u32>,
    /// Answers the host had that the journal may not hold yet (the guest
    /// had not taken them), as JSON text of `Result<Value, ToolFailure>`:
    /// a replay hands them over instead of sending the call again.
    #[serde(default)]
    pub answered: BTreeMap<u32, String>,
}

impl Sends {
    /// Drops what `journal` holds already: answers the guest took.
    pub fn settle(&mut self, journal: &Journal) {
        for e in &journal.entries {
            if let airlock_sandbox::Entry::Done { id, .. } = e {
                self.answered.remove(id);
                self.unanswered.remove(id);
            }
        }
    }
}

/// Parks in a row an execution may make without taking a single new
/// answer — each follow-up finding the same read still running — before
/// it ends (`stalled`): four hours of 20 s answers. A slow read is not
/// followed for ever, and each park (a store write) stays bounded.
pub const MAX_IDLE_PARKS: u32 = 720;

/// The answers a journal holds.
pub fn answers(journal: &Journal) -> usize {
    journal
        .entries
        .iter()
        .filter(|e| matches!(e, airlock_sandbox::Entry::Done { .. }))
        .count()
}

/// A parked execution a follow-up took.
pub struct Taken {
    pub parked: Parked,
    /// A process that took it before died mid-resume.
    pub orphan: bool,
    /// This take's lease: what parking it again, putting it back or
    /// ending it must show.
    pub holder: String,
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
    #[error("limit `durable.record_bytes` ({} bytes): this run of the execution has written that much of its journal down, once before each change it sent and once after; make the rest of the changes in a new execution, or take narrower results before them", RECORD_BYTES)]
    RecordBytes,
    /// The detail is the operator's (the log has it), not the agent's.
    #[error("the store of parked executions cannot be reached, so the execution cannot wait")]
    Unavailable,
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
    #[error("execution {0} lived longer than it may (limit `lifetime_ms`, {1} ms from its first start, waiting included), so it ended and none of it runs again; what it changed before is done (see its trace): run only what is left, with `script`")]
    Expired(String, u64),
    #[error("the store of parked executions cannot be reached, so execution {0} cannot be followed now; try again shortly")]
    Unavailable(String),
}

/// What is sealed (encrypted) in a row's body.
#[derive(Serialize, Deserialize)]
struct Body {
    script: String,
    journal: Journal,
    waiting: Vec<Waiting>,
    #[serde(default)]
    idle: u32,
    #[serde(default)]
    sends: Sends,
}

pub struct Durable {
    gateway: Arc<Gateway>,
    store: Arc<dyn ParkedStore>,
    /// This process, as the holder of the executions it resumes; each
    /// take adds a number of its own.
    process: String,
    takes: AtomicU64,
    lease: Duration,
    /// `lifetime_ms`: how long an execution lives from its first start.
    lifetime: Duration,
    key: OnceLock<[u8; 32]>,
}

/// Why a body could not be opened.
enum Unsealed {
    /// The key cannot be read now (the store is down): nothing is known
    /// about the body.
    NoKey(String),
    /// It does not decrypt under this row's keys: altered or moved.
    Forged,
    /// It decrypts but does not parse (written by another version).
    Unreadable(String),
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Durable {
    /// Parks in `gateway`'s state; a follow-up holds what it takes for
    /// `wall_time` (the execution's limit), `queue_wait` (the longest it
    /// may wait for a slot) and [`LEASE_MARGIN`].
    pub fn new(gateway: Arc<Gateway>, limits: &Limits, queue_wait: Duration) -> Self {
        let wall_time = limits.wall_time();
        let mut process = [0u8; 8];
        getrandom::fill(&mut process).expect("the system's random numbers");
        Self {
            store: gateway.state().parked.clone(),
            gateway,
            process: hex::encode(process),
            takes: AtomicU64::new(0),
            lease: FOLLOW_WAIT + wall_time + queue_wait + LEASE_MARGIN,
            lifetime: limits.lifetime(),
            key: OnceLock::new(),
        }
    }

    /// The sealing key: derived from the deployment's approval secret,
    /// which every replica shares. Not an HMAC of a label under the
    /// secret, which is how approvers' tags of secrets are made: no tag
    /// an agent sees is this key.
    fn key(&self) -> Result<[u8; 32], String> {
        if let Some(k) = self.key.get() {
            return Ok(*k);
        }
        let secret = self
            .gateway
            .approvals()
            .summary_key()
            .map_err(|e| e.to_string())?;
        let mut h = Sha256::new();
        h.update(b"airlock parked execution v2\0");
        h.update(secret);
        let key: [u8; 32] = h.finalize().into();
        Ok(*self.key.get_or_init(|| key))
    }

    /// What a body is bound to: its row's execution, identity and birth.
    fn bound(execution: &str, identity: &str, born_ms: i64) -> Vec<u8> {
        let mut ad = Vec::new();
        for part in [execution, identity, &born_ms.to_string()] {
            ad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            ad.extend_from_slice(part.as_bytes());
        }
        ad
    }

    fn cipher(&self) -> Result<LessSafeKey, String> {
        let key = self.key()?;
        Ok(LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, &key).expect("a 32-byte key"),
        ))
    }

    fn seal(&self, execution: &str, p: &Parked) -> Result<String, String> {
        let mut data = serde_json::to_vec(&Body {
            script: p.script.clone(),
            journal: p.journal.clone(),
            waiting: p.waiting.clone(),
            idle: p.idle,
            sends: p.sends.clone(),
        })
        .map_err(|e| e.to_string())?;
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| e.to_string())?;
        self.cipher()?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::bound(execution, &p.identity, p.born_ms)),
                &mut data,
            )
            .map_err(|_| "sealing failed".to_string())?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        // v3: a body with `sends`. A version that knows only v2 would
        // resume it ignoring them, and send no records: it waits for this
        // one instead.
        Ok(format!(
            "v3.{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(out)
        ))
    }

    /// The row that keeps `parked` under `execution`, its body sealed.
    fn sealed_row(&self, execution: &str, parked: &Parked) -> Result<ParkedRow, String> {
        let body = self.seal(execution, parked)?;
        Ok(ParkedRow {
            execution: execution.to_string(),
            identity: parked.identity.clone(),
            born_ms: parked.born_ms,
            bytes: body.len().min(i64::MAX as usize) as i64,
            waiting: request_ids(&parked.waiting),
            body,
            asked: parked.prompts.asked,
            declined: parked.prompts.declined,
            calls: parked.calls,
        })
    }

    /// When a lease taken at `now` (ms since the epoch) runs out.
    fn lease_until(&self, now: i64) -> i64 {
        now.saturating_add(self.lease.as_millis().min(i64::MAX as u128) as i64)
    }

    /// The body of `row`, if its seal holds.
    fn open(&self, row: &ParkedRow) -> Result<Body, Unsealed> {
        let cipher = self.cipher().map_err(Unsealed::NoKey)?;
        // Another version's format is not a forgery: it waits for that
        // version.
        let body = ["v3.", "v2."]
            .iter()
            .find_map(|v| row.body.strip_prefix(v))
            .ok_or_else(|| {
                Unsealed::Unreadable("a body format this version does not know".into())
            })?;
        let sealed = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(body)
            .ok()
            .filter(|b| b.len() >= NONCE_LEN)
            .ok_or(Unsealed::Forged)?;
        let (nonce, data) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Unsealed::Forged)?;
        let mut data = data.to_vec();
        let plain = cipher
            .open_in_place(
                nonce,
                Aad::from(Self::bound(&row.execution, &row.identity, row.born_ms)),
                &mut data,
            )
            .map_err(|_| Unsealed::Forged)?;
        serde_json::from_slice(plain).map_err(|e| Unsealed::Unreadable(e.to_string()))
    }

    /// Keeps `parked` under `execution` within the caps, not to be
    /// followed before [`Durable::ready`] (once its parked line is
    /// written). `holder`: the lease of the take that resumed it, when it
    /// parks again.
    pub fn park(
        &self,
        execution: &str,
        parked: &Parked,
        holder: Option<&str>,
    ) -> Result<(), ParkError> {
        let unavailable = |e: &dyn std::fmt::Display| {
            tracing::warn!(execution, error = %e, "an execution could not park");
            ParkError::Unavailable
        };
        let row = self
            .sealed_row(execution, parked)
            .map_err(|e| unavailable(&e))?;
        let kept = self
            .store
            .park(&row, holder, &CAPS, now_ms())
            .map_err(|e| unavailable(&e))?;
        kept.map_err(|refused| self.refusal(refused, &parked.identity))
    }

    /// How long a take or a run holds an execution.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// A lease name of this process's own, for one take or one run.
    pub fn new_holder(&self) -> String {
        format!(
            "{}-{}",
            self.process,
            self.takes.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Writes down where a running execution stands (its journal, what
    /// it sent and was answered) under `holder`'s lease, renewed; `new`
    /// adds the row (held by `holder` from the start). A record of more
    /// than `budget` bytes is not written. The bytes written, when it is.
    pub fn checkpoint(
        &self,
        execution: &str,
        parked: &Parked,
        holder: &str,
        new: bool,
        budget: u64,
    ) -> Result<u64, ParkError> {
        // Refused before anything is sealed when it cannot fit: its
        // journal's bytes as counted, its script and kept answers, and
        // base64's third.
        let estimate = (parked.journal.bytes()
            + parked.script.len() as u64
            + parked
                .sends
                .answered
                .values()
                .map(|a| a.len() as u64)
                .sum::<u64>())
            / 3
            * 4;
        if estimate > budget {
            return Err(ParkError::RecordBytes);
        }
        off_worker(|| self.seal_and_write(execution, parked, holder, new, budget))
    }

    fn seal_and_write(
        &self,
        execution: &str,
        parked: &Parked,
        holder: &str,
        new: bool,
        budget: u64,
    ) -> Result<u64, ParkError> {
        let unavailable = |e: &dyn std::fmt::Display| {
            tracing::warn!(execution, error = %e, "a running execution could not be journaled");
            ParkError::Unavailable
        };
        let row = self
            .sealed_row(execution, parked)
            .map_err(|e| unavailable(&e))?;
        if row.bytes as u64 > budget {
            return Err(ParkError::RecordBytes);
        }
        let now = now_ms();
        let until = self.lease_until(now);
        let kept = self
            .store
            .checkpoint(&row, holder, new, until, &CAPS, now)
            .map_err(|e| unavailable(&e))?;
        kept.map_err(|refused| self.refusal(refused, &parked.identity))?;
        Ok(row.bytes as u64)
    }

    fn refusal(&self, refused: ParkRefusal, identity: &str) -> ParkError {
        match refused {
            ParkRefusal::PerIdentity => ParkError::PerIdentity(identity.to_string()),
            ParkRefusal::Total => ParkError::Total,
            ParkRefusal::BytesPerIdentity => ParkError::BytesPerIdentity(identity.to_string()),
            ParkRefusal::BytesTotal => ParkError::BytesTotal,
            ParkRefusal::LeaseLost => ParkError::LeaseLost,
        }
    }

    /// Its parked line is written: its identity may follow it now.
    pub fn ready(&self, execution: &str) {
        if let Err(e) = self.store.ready(execution) {
            tracing::warn!(execution, error = %e, "a parked execution could not be made ready to follow; it ends when its lifetime does");
        }
    }

    /// Takes `execution` out to resume it, if `identity` parked it; held
    /// under this take's own lease until it parks again, ends, or is put
    /// back.
    pub fn take(&self, execution: &str, identity: &str) -> Result<Taken, FollowError> {
        let now = now_ms();
        let until = self.lease_until(now);
        let holder = self.new_holder();
        let taken = self
            .store
            .take(execution, identity, &holder, now, until)
            .map_err(|e| {
                tracing::warn!(execution, error = %e, "a parked execution could not be taken");
                FollowError::Unavailable(execution.to_string())
            })?;
        let (row, orphan) = match taken {
            Take::Taken { row, orphan } => (row, orphan),
            Take::Busy => return Err(FollowError::Running(execution.to_string())),
            Take::Unknown => return Err(FollowError::Unknown(execution.to_string())),
        };
        if now.saturating_sub(row.born_ms) > self.lifetime.as_millis() as i64 {
            // Past its lifetime before the periodic sweep found it: it
            // ends here, in the log as the sweep would have ended it. A
            // row that stays (the store failed) is the sweep's to end,
            // once the lease runs out: one end line either way.
            if !self.ended(execution, &holder) {
                return Err(FollowError::Unavailable(execution.to_string()));
            }
            let lived = since(row.born_ms);
            crate::metrics::global().execution("LifetimeExceeded", None, Default::default());
            if let Err(e) =
                self.gateway
                    .execution_finished(execution, "LifetimeExceeded", row.calls, lived)
            {
                tracing::warn!(execution, error = %e, "could not record the end of an execution past its lifetime");
            }
            return Err(FollowError::Expired(
                execution.to_string(),
                self.lifetime.as_millis() as u64,
            ));
        }
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
                    idle: body.idle,
                    sends: body.sends,
                },
                orphan,
                holder,
            }),
            Err(Unsealed::Forged) => {
                tracing::warn!(
                    execution,
                    "a parked execution's seal does not hold; it is ended"
                );
                self.ended(execution, &holder);
                Err(FollowError::Tampered(execution.to_string()))
            }
            // Nothing is known against it: it waits on.
            Err(Unsealed::NoKey(why) | Unsealed::Unreadable(why)) => {
                tracing::warn!(execution, why, "a parked execution could not be opened now");
                self.put_back(execution, &holder);
                Err(FollowError::Unavailable(execution.to_string()))
            }
        }
    }

    /// Puts back an execution a follow-up took and did not run (nothing
    /// was decided yet, or it could not start): the row as it was.
    pub fn put_back(&self, execution: &str, holder: &str) {
        if let Err(e) = self.store.put_back(execution, holder) {
            tracing::warn!(execution, error = %e, "a parked execution could not be put back; it can be followed again once its lease ends");
        }
    }

    /// The approval requests `identity`'s parked `execution` waits for
    /// (`None`: no such execution of theirs is waiting).
    pub fn waiting_requests(&self, execution: &str, identity: &str) -> Option<Vec<String>> {
        let row = self.store.get(execution, identity, now_ms()).ok()??;
        Some(row.waiting)
    }

    /// When `identity`'s waiting `execution` first started (`None`: no
    /// such execution of theirs waits, or a follow-up holds it now).
    pub fn born_ms(&self, execution: &str, identity: &str) -> Option<i64> {
        let row = self.store.get(execution, identity, now_ms()).ok()??;
        Some(row.born_ms)
    }

    /// The questions put to the person about `execution` so far.
    /// A row that cannot be read counts as done asking (fail closed: no
    /// question is put, and no answer decides).
    pub fn prompts(&self, execution: &str, identity: &str) -> Prompts {
        match self.store.get(execution, identity, now_ms()) {
            Ok(Some(row)) => Prompts {
                asked: row.asked,
                declined: row.declined,
            },
            Ok(None) => Prompts::default(),
            Err(_) => Prompts {
                declined: true,
                ..Prompts::default()
            },
        }
    }

    /// Counts a question put, or a decline, for `identity`'s `execution`.
    pub fn prompted(&self, execution: &str, identity: &str, asked: u32, declined: bool) {
        if let Err(e) = self.store.prompted(execution, identity, asked, declined) {
            tracing::warn!(execution, error = %e, "a question put could not be counted");
        }
    }

    /// This process stops without running `holder`'s execution further:
    /// its row is left for the next follow-up to resume at once, as an
    /// orphan (a change its last record names as unanswered is not sent
    /// again), instead of when the lease would have run out.
    pub fn let_go(&self, execution: &str, holder: &str) {
        if let Err(e) = off_worker(|| self.store.let_go(execution, holder)) {
            tracing::warn!(execution, error = %e, "a running execution could not be let go of; it can be followed again once its lease ends");
        }
    }

    /// An execution a take (`holder`) resumed ended: its row goes.
    /// False when the store could not be asked (the row stays, held
    /// until the lease ends).
    pub fn ended(&self, execution: &str, holder: &str) -> bool {
        match self.store.ended(execution, holder) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(execution, error = %e, "an ended execution's row could not be removed: once its lease ends it can be followed again, as an orphan (no change of it is sent again)");
                false
            }
        }
    }

    /// `identity`'s executions in the store, oldest first.
    pub fn list(
        &self,
        identity: &str,
    ) -> Result<Vec<ParkedInfo>, airlock_gateway::parked::ParkedUnavailable> {
        off_worker(|| {
            self.store
                .list(Some(identity), now_ms(), PARKED_PER_IDENTITY as u32 * 2)
        })
    }

    /// Takes out the executions past their lifetime, for their end lines.
    pub fn expired(&self) -> Vec<ParkedInfo> {
        let now = now_ms();
        let before = now.saturating_sub(self.lifetime.as_millis() as i64);
        self.store.expired(before, now).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "parked executions past their lifetime could not be read");
            Vec::new()
        })
    }
}

/// Runs `f`, which takes this thread a while (sealing a large journal,
/// a SQLite file waiting for its lock), telling a multi-threaded runtime
/// so, so the worker's other tasks move to another one meanwhile
/// (PostgreSQL's store does the same for its own wait).
fn off_worker<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// The approval requests waiting calls name.
pub fn request_ids(waiting: &[Waiting]) -> Vec<String> {
    waiting
        .iter()
        .filter_map(|w| w.details.get("request_id")?.as_str().map(str::to_string))
        .collect()
}

/// What a waiting execution waits for, as a log line says it: its
/// approval requests, and the calls that were still running when its
/// answer was due (by tool).
pub fn waits_for(waiting: &[Waiting]) -> String {
    let said: Vec<String> = waiting
        .iter()
        .map(
            |w| match w.details.get("request_id").and_then(|r| r.as_str()) {
                Some(id) => id.to_string(),
                None => format!(
                    "{} (still running when the answer was due)",
                    airlock_catalog::catalog::quote_name(&w.tool)
                ),
            },
        )
        .collect();
    match said.is_empty() {
        true => "nothing named".into(),
        false => said.join(", "),
    }
}

/// How long ago `born_ms` was.
pub fn since(born_ms: i64) -> Duration {
    Duration::from_millis(now_ms().saturating_sub(born_ms).max(0) as u64)
}

/// Now, in ms since the epoch, for an execution's birth.
pub fn born_now() -> i64 {
    now_ms()
}

/// Whether any of `requests` is decided (or gone), waiting at most
/// `bound` for one. Decisions can be made on any replica, so the store is
/// asked, every 200 ms.
pub async fn decision_in(
    gateway: &Gateway,
    requests: &[String],
    bound: std::time::Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        // Gone (purged after it expired) or expired counts as decided:
        // sent again, the call files a new request. A store that cannot
        // answer decides nothing.
        let now = gateway.now_ms();
        let decided = requests.is_empty()
            || requests.iter().any(|id| match gateway.approvals().get(id) {
                Ok(r) => {
                    r.status != airlock_gateway::approval::Status::Pending || r.expires_ms <= now
                }
                Err(airlock_gateway::approval::ApprovalError::NotFound(_)) => true,
                Err(_) => false,
            });
        if decided {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep_until(
            deadline.min(tokio::time::Instant::now() + std::time::Duration::from_millis(200)),
        )
        .await;
    }
}
