//! What the host keeps per wasm instance (`StoreData`) and per execution
//! (`RunState`), and the memory limiter.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Instant,
};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use wasmtime::{Memory, ResourceLimiter};

use crate::{
    limits::{Limit, Limits},
    outcome::{CallRecord, ExecError, LogEntry},
    tool_host::{ToolFailure, Trace},
};

/// The failures the host reported to the guest, by call id, with the tool's
/// name: the only source of an execution's `ToolError`, `PolicyDenied`,
/// `ApprovalRequired` and call-level `LimitExceeded`, whatever the guest
/// claims.
pub type Failures = std::sync::Arc<std::sync::Mutex<HashMap<u32, (String, ToolFailure)>>>;

/// What a pending id stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    Call,
    Timer,
}

/// Per-instance host state; lives as long as the wasm instance.
#[derive(Default)]
pub struct StoreData {
    pub memory: Option<Memory>,
    /// The guest's WASI context (granting nothing) and its captured
    /// stdout/stderr, shown when the guest crashes.
    pub system: crate::wasi::GuestSystem,
    pub memory_limit: u64,
    pub peak_memory: u64,
    /// Set when a `memory.grow` was refused: the size asked for.
    pub memory_denied: Option<u64>,
    /// Wall-clock deadline of the current execution, checked on every epoch
    /// tick while guest code runs.
    pub deadline: Option<Instant>,
    pub run: Option<RunState>,
}

/// What the dispatcher is asked to do.
pub enum Request {
    Call {
        id: u32,
        name: String,
        args: Value,
        /// Started before a pause or a crash (the journal shows it), and
        /// sent now because the journal shows no end: it may have reached
        /// the tool host before.
        resumed: bool,
    },
    /// A call the host refused before it reached the tool host (a name it
    /// would not read); completes at once with `failure`.
    Refused {
        id: u32,
        name: String,
        failure: ToolFailure,
    },
    Timer {
        id: u32,
        delay_ms: u32,
    },
    /// Drop timer `id` now.
    Cancel {
        id: u32,
    },
}

/// The status of a [`Done`] that is not one: the call waits (see
/// `codes::WAITING`); the host keeps it, the guest never sees it.
pub const STATUS_WAITING: u32 = u32::MAX;

/// A finished call or timer, as the guest will see it.
pub struct Done {
    pub id: u32,
    pub status: u32,
    pub payload: Vec<u8>,
}

/// Per-execution host state.
pub struct RunState {
    pub script: Vec<u8>,
    pub limits: Limits,
    pub started: Instant,
    pub requests: UnboundedSender<Request>,
    pub completions: UnboundedReceiver<Done>,
    /// Completions taken out of the channel early (to drop those of timers
    /// cleared meanwhile), in order, not yet handed to the guest.
    pub ready: VecDeque<Done>,
    /// Payload bytes of finished calls the guest has not taken yet: the
    /// host holds them for the script, so they count against
    /// `memory_bytes` (with the guest's own memory).
    pub backlog: Arc<AtomicU64>,
    /// Ids of calls and timers not yet delivered to the guest.
    pub outstanding: HashMap<u32, Pending>,
    /// Timers among `outstanding` (bounded by `limits.timers`).
    pub timers_armed: u32,
    pub next_id: u32,
    pub calls_started: u32,
    /// Argument bytes charged so far (bounded by `limits.args_bytes`).
    pub args_bytes: u64,
    /// Payload of the completion most recently reported by `wait`.
    pub payload: Vec<u8>,
    pub logs: Vec<LogEntry>,
    /// Bytes charged to `log_bytes` by the lines kept, and by all lines.
    pub log_bytes_kept: u64,
    pub log_bytes_total: u64,
    pub logs_dropped: u64,
    pub finished: Option<(u32, Vec<u8>)>,
    /// Set by whichever check stopped the execution.
    pub limit_hit: Option<ExecError>,
    pub trace: Trace,
    pub failures: Failures,
    /// A journaled execution's recorder (see `replay.rs`).
    pub recorder: Option<crate::replay::Shared>,
    /// What the replayed journal left started and not ended, to start
    /// when the replay runs out.
    pub resume: Resume,
    /// Calls that wait for something outside the execution (their
    /// failure is in `failures`): still pending, never handed to the guest.
    pub waiting: std::collections::BTreeSet<u32>,
}

/// Calls and timers a replay started that the journal shows no end of.
#[derive(Default)]
pub struct Resume {
    pub calls: std::collections::BTreeMap<u32, Request>,
    /// Timer id → (delay, when it was armed, Unix ms).
    pub timers: std::collections::BTreeMap<u32, (u32, u64)>,
}

impl RunState {
    pub fn new(
        script: Vec<u8>,
        limits: Limits,
        started: Instant,
        requests: UnboundedSender<Request>,
        completions: UnboundedReceiver<Done>,
    ) -> Self {
        Self {
            script,
            limits,
            started,
            requests,
            completions,
            ready: VecDeque::new(),
            backlog: Arc::default(),
            outstanding: HashMap::new(),
            timers_armed: 0,
            next_id: 1,
            calls_started: 0,
            args_bytes: 0,
            payload: Vec::new(),
            logs: Vec::new(),
            log_bytes_kept: 0,
            log_bytes_total: 0,
            logs_dropped: 0,
            finished: None,
            limit_hit: None,
            trace: Trace::default(),
            failures: Failures::default(),
            recorder: None,
            resume: Resume::default(),
            waiting: Default::default(),
        }
    }

    /// Takes a call's "waiting" in place of an end: it stays pending.
    /// `false` when `done` is a real end.
    pub fn waits(&mut self, done: &Done) -> bool {
        if done.status != STATUS_WAITING {
            return false;
        }
        self.unhold(done);
        if self.outstanding.contains_key(&done.id) {
            self.waiting.insert(done.id);
        }
        true
    }

    /// A journaled execution whose every pending id is a waiting call
    /// stops here: the execution ends as `Parked`, naming what it waits
    /// for. Returns whether it did.
    pub fn park_if_only_waiting(&mut self) -> bool {
        if self.recorder.is_none()
            || self.waiting.is_empty()
            || !self.outstanding.keys().all(|id| self.waiting.contains(id))
        {
            return false;
        }
        let mut failures = self.failures.lock().unwrap();
        let waiting = self
            .waiting
            .iter()
            .filter_map(|id| {
                let (tool, f) = failures.remove(id)?;
                Some(crate::outcome::Waiting {
                    call: *id,
                    tool,
                    message: f.message,
                    details: f.details,
                })
            })
            .collect();
        drop(failures);
        if self.limit_hit.is_none() {
            self.limit_hit = Some(ExecError::Parked { waiting });
        }
        true
    }

    /// The recorder's lock, when the execution is journaled.
    pub fn recorder(&self) -> Option<std::sync::MutexGuard<'_, crate::replay::Recorder>> {
        self.recorder
            .as_ref()
            .map(|r| r.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Ends the execution with the recorder's error, if it stopped it.
    pub fn recorder_stopped(&mut self) -> bool {
        let error = self.recorder().and_then(|r| r.error());
        match error {
            Some(e) => {
                if self.limit_hit.is_none() {
                    self.limit_hit = Some(e);
                }
                true
            }
            None => false,
        }
    }

    /// At the first import after a replay ran out: starts the calls and
    /// timers the journal left pending (calls as `resumed`, timers when
    /// they were due).
    pub fn go_live_if_due(&mut self) {
        let due = self.recorder().is_some_and(|mut r| r.going_live());
        if !due {
            return;
        }
        let resume = std::mem::take(&mut self.resume);
        for (_, request) in resume.calls {
            let _ = self.requests.send(request);
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        for (id, (delay_ms, at_ms)) in resume.timers {
            let due = at_ms.saturating_add(delay_ms as u64);
            let delay_ms = due.saturating_sub(now_ms).min(delay_ms as u64) as u32;
            let _ = self.requests.send(Request::Timer { id, delay_ms });
        }
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn wall_time_exceeded(&mut self) {
        if self.limit_hit.is_none() {
            let used = self.elapsed_ms().max(self.limits.wall_time_ms);
            self.limit_hit = Some(ExecError::limit(
                Limit::WallTimeMs,
                self.limits.wall_time_ms,
                used,
            ));
        }
    }

    /// Registers a tool call the script made: counted, given an id, traced
    /// (as `cancelled` until it ends).
    pub fn start_call(&mut self, tool: String) -> u32 {
        self.calls_started += 1;
        let id = self.take_id();
        self.outstanding.insert(id, Pending::Call);
        let start_us = self.started.elapsed().as_micros() as u64;
        self.trace.lock().unwrap().push((
            id,
            CallRecord {
                tool,
                start_us,
                duration_us: None,
                status: crate::codes::CANCELLED.into(),
                replayed: false,
            },
        ));
        id
    }

    /// Counts a console line that did not fit, and what it would have
    /// cost.
    pub fn drop_log(&mut self, charge: u64) {
        self.log_bytes_total = self.log_bytes_total.saturating_add(charge);
        self.logs_dropped += 1;
    }

    /// Ends the execution at `limit` (the first limit hit wins).
    pub fn hit(&mut self, limit: Limit, value: u64, used: u64) {
        if self.limit_hit.is_none() {
            self.limit_hit = Some(ExecError::limit(limit, value, used));
        }
    }

    /// Moves every completion waiting in the channel to `ready`, dropping
    /// those whose id is no longer pending (a timer cleared after it fired):
    /// a script arming and clearing timers in a loop without ever waiting
    /// must not pile them up.
    pub fn drain(&mut self) {
        while let Ok(done) = self.completions.try_recv() {
            if self.waits(&done) {
                continue;
            }
            if self.outstanding.contains_key(&done.id) {
                self.ready.push_back(done);
            } else {
                self.unhold(&done);
            }
        }
    }

    /// The next completion for a pending id that is already here.
    pub fn next_ready(&mut self) -> Option<Done> {
        while let Some(done) = self.ready.pop_front() {
            if self.settle(done.id).is_some() {
                return Some(done);
            }
            self.unhold(&done);
        }
        None
    }

    /// Takes a completion's payload off the backlog.
    pub fn unhold(&self, done: &Done) {
        self.backlog
            .fetch_sub(done.payload.len() as u64, Ordering::Relaxed);
    }

    /// Ends the execution at `memory_bytes` when the guest's memory and the
    /// results it has not taken pass it together.
    pub fn check_backlog(&mut self, guest_memory: u64) -> bool {
        let used = guest_memory.saturating_add(self.backlog.load(Ordering::Relaxed));
        if used > self.limits.memory_bytes {
            self.hit(Limit::MemoryBytes, self.limits.memory_bytes, used);
            return false;
        }
        true
    }

    /// Forgets a delivered or cancelled id; whether it was pending.
    pub fn settle(&mut self, id: u32) -> Option<Pending> {
        let kind = self.outstanding.remove(&id);
        if kind == Some(Pending::Timer) {
            self.timers_armed -= 1;
        }
        kind
    }

    pub fn take_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }
}

impl ResourceLimiter for StoreData {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let desired = desired as u64;
        if desired > self.memory_limit {
            self.memory_denied = Some(desired);
            return Ok(false);
        }
        self.peak_memory = self.peak_memory.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // The guest's function table is fixed at link time; growth would be
        // a guest bug, not a script's doing.
        Ok(desired <= 1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    #[test]
    fn completions_of_cleared_timers_are_dropped_not_kept() {
        let (req_tx, _req_rx) = unbounded_channel();
        let (done_tx, done_rx) = unbounded_channel();
        let mut run = RunState::new(
            Vec::new(),
            Limits::default(),
            Instant::now(),
            req_tx,
            done_rx,
        );
        run.outstanding.insert(1, Pending::Timer);
        run.timers_armed = 1;
        for id in 2..1002 {
            // Fired, then cleared by the guest before it waited.
            run.backlog.fetch_add(3, Ordering::Relaxed);
            done_tx
                .send(Done {
                    id,
                    status: 2,
                    payload: vec![0; 3],
                })
                .unwrap();
        }
        run.backlog.fetch_add(3, Ordering::Relaxed);
        done_tx
            .send(Done {
                id: 1,
                status: 2,
                payload: vec![0; 3],
            })
            .unwrap();
        run.drain();
        assert_eq!(
            run.ready.len(),
            1,
            "only the pending timer's completion is kept"
        );
        assert_eq!(run.backlog.load(Ordering::Relaxed), 3);
        let done = run.next_ready().unwrap();
        assert_eq!(done.id, 1);
        assert_eq!(run.timers_armed, 0);
        assert!(run.next_ready().is_none());
    }
}
