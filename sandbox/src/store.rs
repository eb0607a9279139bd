//! What the host keeps per wasm instance (`StoreData`) and per execution
//! (`RunState`), and the memory limiter.

use std::{collections::HashSet, time::Instant};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use wasmtime::{Memory, ResourceLimiter};

use crate::{
    limits::{Limit, Limits},
    outcome::{CallRecord, ExecError, LogEntry},
};

/// Every call the script started, by id, shared with the dispatcher so the
/// trace survives the dispatcher being dropped.
pub type Trace = std::sync::Arc<std::sync::Mutex<Vec<(u32, CallRecord)>>>;

/// Per-instance host state; lives as long as the wasm instance.
#[derive(Default)]
pub struct StoreData {
    pub memory: Option<Memory>,
    /// Guest stdout/stderr (bounded), shown when the guest crashes.
    pub captured_output: Vec<u8>,
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
    Call { id: u32, name: String, args: Value },
    Timer { id: u32, delay_ms: u32 },
    Cancel { id: u32 },
}

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
    /// Ids of calls and timers not yet delivered to the guest.
    pub outstanding: HashSet<u32>,
    pub next_id: u32,
    pub calls_started: u32,
    /// Payload of the completion most recently reported by `wait`.
    pub payload: Vec<u8>,
    pub logs: Vec<LogEntry>,
    pub log_bytes_kept: u64,
    pub log_bytes_total: u64,
    pub finished: Option<(u32, Vec<u8>)>,
    /// Set by whichever check stopped the execution.
    pub limit_hit: Option<ExecError>,
    pub trace: Trace,
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
            outstanding: HashSet::new(),
            next_id: 1,
            calls_started: 0,
            payload: Vec::new(),
            logs: Vec::new(),
            log_bytes_kept: 0,
            log_bytes_total: 0,
            finished: None,
            limit_hit: None,
            trace: Trace::default(),
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
