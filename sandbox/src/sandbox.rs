//! The public face of the crate: a [`Sandbox`] built once, then
//! [`Sandbox::execute`] per script, in `fresh` or `reuse` mode, behind an
//! admission gate (`executions_in_flight`, `queue_depth`, `queue_wait_ms`,
//! shared between identities: see [`crate::admission`]).

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use airlock_guest_sdk::abi;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::{Engine, InstancePre, Store, UpdateDeadline};

use crate::{
    admission::Admission,
    cache,
    engine::{self, EngineOptions},
    execution::{self, GuestFns},
    journal::Journal,
    limits::{Capacity, Limit, Limits, LimitsError},
    outcome::{ExecError, JournalStats, Outcome, Stats},
    replay::Recorder,
    store::StoreData,
    tool_host::ToolHost,
    SandboxError,
};

/// How instances are used across executions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A new instance for every execution, started from the pre-initialised
    /// snapshot: nothing at all survives an execution.
    #[default]
    Fresh,
    /// An instance serves up to `reuse_runs` executions of one principal
    /// (see [`ToolHost::principal`]), each in a brand-new JS realm built
    /// while the instance sat idle; it is discarded after a limit was hit
    /// or the guest trapped.
    Reuse,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fresh" => Ok(Self::Fresh),
            "reuse" => Ok(Self::Reuse),
            other => Err(format!(
                "unknown mode `{other}`; expected `fresh` or `reuse`"
            )),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Fresh => "fresh",
            Self::Reuse => "reuse",
        })
    }
}

/// How the sandbox is built. Everything here is fixed for its lifetime;
/// per-execution [`Limits`] are passed to each `execute`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: Mode,
    /// Executions one instance serves in `reuse` mode before it is replaced.
    pub reuse_runs: u32,
    pub capacity: Capacity,
    /// Compile the guest with fuel metering so `Limits::fuel` can be used.
    /// Costs guest speed on every execution.
    pub fuel_metering: bool,
    /// Start instances from a pre-initialised snapshot holding a ready JS
    /// realm (the default; turning it off exists to measure the difference).
    pub snapshot: bool,
    /// Where compiled modules are cached; see [`cache::default_dir`].
    pub cache_dir: Option<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Fresh,
            reuse_runs: 64,
            capacity: Capacity::default(),
            fuel_metering: false,
            snapshot: true,
            cache_dir: None,
        }
    }
}

/// Epoch tick: the granularity of the wall-clock check while guest code
/// runs, and how often a long-running script yields its thread.
const TICK: Duration = Duration::from_millis(2);

/// A compiled guest plus the machinery to run scripts in it. Cheap to
/// clone; clones share instances and admission.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Warm {
    store: Store<StoreData>,
    fns: GuestFns,
    uses: u32,
    /// Whose executions this instance has served; it serves no one else.
    principal: Option<String>,
}

struct Inner {
    config: SandboxConfig,
    engine: Engine,
    pre: InstancePre<StoreData>,
    compiled_now: bool,
    admission: Arc<Admission>,
    warm: Mutex<Vec<Warm>>,
    /// Bounds instances being reset in the background.
    reset_slots: Arc<Semaphore>,
    resetting: tokio::sync::watch::Sender<u32>,
    /// Instances to reset, for the reset thread (see [`reset_thread`]).
    resets: std::sync::mpsc::Sender<Reset>,
}

/// One instance to give a new realm, and what to hand back when done.
struct Reset {
    /// Taken when parked.
    warm: Option<Warm>,
    /// Bounds the instances in transit; released when the job is dropped,
    /// before `settle` stops counting it (an execution `settle` lets on
    /// must find the permit free to recycle its own instance).
    permit: Option<OwnedSemaphorePermit>,
    inner: std::sync::Weak<Inner>,
}

impl Sandbox {
    /// Builds the engine and loads the guest, compiling it only if no
    /// compiled copy is cached (first start on a machine).
    pub async fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        config.capacity.validate()?;
        if config.reuse_runs == 0 {
            return Err(LimitsError::Zero {
                field: "reuse_runs",
            }
            .into());
        }
        let e = config.capacity.executions_in_flight;
        let opts = EngineOptions {
            fuel_metering: config.fuel_metering,
            snapshot: config.snapshot,
            cache_dir: config
                .cache_dir
                .clone()
                .or_else(cache::default_dir)
                .ok_or(SandboxError::NoCacheDir)?,
            // in flight + a runbook each of those runs + idle in the
            // reuse pool + being reset
            slots: e * 4 + 2,
        };
        let compiled = engine::load(&opts).await?;
        start_ticker(&compiled.engine);
        let (resets, queue) = std::sync::mpsc::channel();
        if config.mode == Mode::Reuse {
            reset_thread(queue)?;
        }
        Ok(Self {
            inner: Arc::new(Inner {
                engine: compiled.engine,
                pre: compiled.pre,
                compiled_now: compiled.compiled_now,
                admission: Admission::new(config.capacity.clone()),
                warm: Mutex::new(Vec::new()),
                reset_slots: Arc::new(Semaphore::new(e as usize)),
                resetting: tokio::sync::watch::channel(0).0,
                resets,
                config,
            }),
        })
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Whether building this sandbox compiled the guest (no cache yet).
    pub fn compiled_now(&self) -> bool {
        self.inner.compiled_now
    }

    /// Waits until instances released by finished executions are ready for
    /// reuse (their new realm built). Only meaningful in `reuse` mode.
    pub async fn settle(&self) {
        let mut rx = self.inner.resetting.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Executions waiting for a slot right now.
    pub fn queued(&self) -> u32 {
        self.inner.admission.waiting()
    }

    /// Instances idle and ready in the reuse pool.
    pub fn warm_instances(&self) -> usize {
        self.inner.warm.lock().unwrap().len()
    }

    /// Runs one script to completion. Never panics on bad input and never
    /// returns without an [`Outcome`]; dropping the future cancels the
    /// execution and its in-flight tool calls at once.
    pub async fn execute(&self, script: &str, limits: &Limits, host: &dyn ToolHost) -> Outcome {
        self.run(script, limits, host, None).await
    }

    /// Runs one script as a durable execution: replays `journal` (what
    /// crossed the boundary the last time this script ran, if it ran)
    /// without sending anything, then goes on live, appending to it. The
    /// journal afterwards holds everything the execution took, so a later
    /// call with it resumes where this one stopped, on any host with the
    /// same guest. Always in a fresh instance: a reused one's realm holds
    /// state (a seeded random generator) a replay could not reproduce.
    ///
    /// A call the journal shows started and not ended is sent again with
    /// [`ToolCall::resumed`] set; the host decides whether that is safe.
    /// A journal of another script, or a script that asks for something
    /// else than the journal holds, ends in
    /// [`ExecError::ReplayDiverged`] with nothing sent.
    pub async fn execute_journaled(
        &self,
        script: &str,
        limits: &Limits,
        host: &dyn ToolHost,
        journal: &mut Journal,
    ) -> Outcome {
        let stats = Stats {
            mode: Mode::Fresh,
            ..Stats::default()
        };
        let recorder = match Recorder::new(journal, script, limits.journal_bytes) {
            Ok(r) => Arc::new(std::sync::Mutex::new(r)),
            Err(e) => return failed(e, stats),
        };
        let mut outcome = self.run(script, limits, host, Some(recorder.clone())).await;
        // The instance is gone: nothing records any more.
        let mut r = recorder.lock().unwrap_or_else(|p| p.into_inner());
        *journal = r.take_journal();
        outcome.stats.journal = Some(JournalStats {
            entries: journal.entries.len() as u64,
            replayed_entries: r.replayed() as u64,
            bytes: r.bytes(),
        });
        outcome
    }

    async fn run(
        &self,
        script: &str,
        limits: &Limits,
        host: &dyn ToolHost,
        recorder: Option<crate::replay::Shared>,
    ) -> Outcome {
        let t0 = Instant::now();
        let mut stats = Stats {
            mode: self.inner.config.mode,
            ..Stats::default()
        };
        if let Err(e) = self.check_request(script, limits) {
            return failed(e, stats);
        }
        let _slot = match self
            .inner
            .admission
            .admit(host.principal().unwrap_or(""))
            .await
        {
            Ok(p) => p,
            Err(e) => {
                stats.queue_us = t0.elapsed().as_micros() as u64;
                return failed(e, stats);
            }
        };
        stats.queue_us = t0.elapsed().as_micros() as u64;
        let started = Instant::now();

        let principal = host.principal();
        let reuse = recorder.is_none() && self.inner.config.mode == Mode::Reuse;
        let warm = match (reuse, principal) {
            (true, Some(p)) => self.take_warm(limits, p),
            _ => None,
        };
        let Warm {
            mut store,
            fns,
            uses,
            ..
        } = match warm {
            Some(w) => w,
            None => match self.instantiate(limits).await {
                Ok(w) => w,
                Err(e) => return failed(e, stats),
            },
        };
        stats.instance_uses = uses + 1;
        let job = execution::Job {
            script,
            limits,
            host,
            recorder,
            flags: 0,
        };
        let report = execution::run_on(&mut store, &fns, job, started, stats).await;

        if let (true, Some(p)) = (reuse, principal) {
            if !report.poisoned && uses + 1 < self.inner.config.reuse_runs {
                self.recycle(Warm {
                    store,
                    fns,
                    uses: uses + 1,
                    principal: Some(p.to_string()),
                });
            }
        }
        report.outcome
    }

    /// Runs `script` for an execution that already holds its slot, in a
    /// fresh instance of its own that is dropped after: a runbook the
    /// execution's script called. It waits for no slot (its caller holds
    /// one and waits on it, so queueing could deadlock a full gate), and
    /// shares no instance with the caller's script, which must not reach
    /// into the reviewed code's realm.
    ///
    /// The script is reviewed code: it runs as the JavaScript its
    /// approver read, with nothing rewritten (no Markdown fence, `export
    /// default` or TypeScript types taken away), or fails to parse.
    pub async fn execute_within(
        &self,
        script: &str,
        limits: &Limits,
        host: &dyn ToolHost,
    ) -> Outcome {
        self.run_alone(script, limits, host, abi::RUN_AS_WRITTEN)
            .await
    }

    /// Whether `script` parses as JavaScript as written, the way
    /// [`Sandbox::execute_within`] runs reviewed code; nothing of it
    /// runs. `Err` is the syntax error (line and column the script's
    /// own), or why the check could not be made. For checking a runbook
    /// before anyone approves it.
    pub async fn check_as_written(&self, script: &str) -> Result<(), ExecError> {
        let limits = Limits {
            source_bytes: Limits::default().source_bytes.max(script.len() as u64),
            ..Limits::default()
        };
        let flags = abi::RUN_AS_WRITTEN | abi::RUN_CHECK_ONLY;
        self.run_alone(script, &limits, &NoTools, flags)
            .await
            .result
            .map(|_| ())
    }

    /// Runs `script` in a fresh instance of its own, with no slot and the
    /// guest's `RUN_*` `flags`.
    async fn run_alone(
        &self,
        script: &str,
        limits: &Limits,
        host: &dyn ToolHost,
        flags: u32,
    ) -> Outcome {
        let stats = Stats {
            mode: Mode::Fresh,
            instance_uses: 1,
            ..Stats::default()
        };
        if let Err(e) = self.check_request(script, limits) {
            return failed(e, stats);
        }
        let started = Instant::now();
        let Warm { mut store, fns, .. } = match self.instantiate(limits).await {
            Ok(w) => w,
            Err(e) => return failed(e, stats),
        };
        let job = execution::Job {
            flags,
            ..execution::Job::plain(script, limits, host)
        };
        execution::run_on(&mut store, &fns, job, started, stats)
            .await
            .outcome
    }

    fn check_request(&self, script: &str, limits: &Limits) -> Result<(), ExecError> {
        let invalid = |e: LimitsError| ExecError::InvalidRequest {
            message: e.to_string(),
        };
        limits.validate().map_err(invalid)?;
        if limits.fuel.is_some() && !self.inner.config.fuel_metering {
            return Err(invalid(LimitsError::FuelNotMetered));
        }
        if script.len() as u64 > limits.source_bytes {
            return Err(ExecError::limit(
                Limit::SourceBytes,
                limits.source_bytes,
                script.len() as u64,
            ));
        }
        Ok(())
    }

    /// An idle instance that served `principal` before, newest first.
    fn take_warm(&self, limits: &Limits, principal: &str) -> Option<Warm> {
        // Instances grown past this execution's memory limit are
        // discarded, after the lock is released: dropping a store clears
        // its memory.
        let mut discarded = Vec::new();
        let mut warm = self.inner.warm.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        while let Some(i) = warm
            .iter()
            .rposition(|w| w.principal.as_deref() == Some(principal))
        {
            let w = warm.remove(i);
            let size = w
                .store
                .data()
                .memory
                .map(|m| m.data_size(&w.store) as u64)
                .unwrap_or(0);
            if size <= limits.memory_bytes {
                found = Some(w);
                break;
            }
            discarded.push(w);
        }
        drop(warm);
        drop(discarded);
        found
    }

    async fn instantiate(&self, limits: &Limits) -> Result<Warm, ExecError> {
        self.instantiate_from(&self.inner.pre, limits).await
    }

    async fn instantiate_from(
        &self,
        pre: &InstancePre<StoreData>,
        limits: &Limits,
    ) -> Result<Warm, ExecError> {
        let mut store = Store::new(
            &self.inner.engine,
            StoreData {
                memory_limit: limits.memory_bytes,
                ..StoreData::default()
            },
        );
        store.limiter(|d| d);
        store.set_hostcall_fuel(crate::wasi::HOSTCALL_BYTES);
        store.epoch_deadline_callback(|mut ctx| {
            let data = ctx.data_mut();
            let stop = || Err(wasmtime::Error::msg(airlock_guest_sdk::abi::TRAP_LIMIT));
            if data.deadline.is_some_and(|d| Instant::now() >= d) {
                if let Some(run) = data.run.as_mut() {
                    run.wall_time_exceeded();
                }
                return stop();
            }
            // Results the script does not take while it computes count
            // against its memory; a journal filled by clock reads, or a
            // replay a clock read found diverging, ends it too.
            let memory = data.peak_memory;
            if let Some(run) = data.run.as_mut() {
                if !run.check_backlog(memory) || run.recorder_stopped() {
                    return stop();
                }
            }
            Ok(UpdateDeadline::Yield(1))
        });
        let instance = match pre.instantiate_async(&mut store).await {
            Ok(i) => i,
            Err(e) => {
                return Err(match store.data().memory_denied {
                    Some(desired) => {
                        ExecError::limit(Limit::MemoryBytes, limits.memory_bytes, desired)
                    }
                    None => ExecError::Internal {
                        message: format!("could not start a sandbox instance: {e:#}"),
                    },
                })
            }
        };
        let memory = instance.get_memory(&mut store, airlock_guest_sdk::abi::EXPORT_MEMORY);
        store.data_mut().memory = memory;
        let fns = GuestFns::new(&mut store, &instance).map_err(|e| ExecError::Internal {
            message: format!("the guest lacks an export: {e:#}"),
        })?;
        Ok(Warm {
            store,
            fns,
            uses: 0,
            principal: None,
        })
    }

    /// Runs `script` in an arbitrary module linked against the same host
    /// imports, through the same execution path. For tests that play a
    /// hostile guest (forged pointers, protocol violations); not for
    /// production use.
    #[doc(hidden)]
    pub async fn execute_module(
        &self,
        wasm: &[u8],
        script: &str,
        limits: &Limits,
        host: &dyn ToolHost,
    ) -> Result<Outcome, SandboxError> {
        let module =
            wasmtime::Module::new(&self.inner.engine, wasm).map_err(SandboxError::engine)?;
        let pre = engine::linker(&self.inner.engine)?
            .instantiate_pre(&module)
            .map_err(SandboxError::engine)?;
        let stats = Stats {
            mode: self.inner.config.mode,
            instance_uses: 1,
            ..Stats::default()
        };
        let Warm { mut store, fns, .. } = match self.instantiate_from(&pre, limits).await {
            Ok(w) => w,
            Err(e) => return Ok(failed(e, stats)),
        };
        let started = Instant::now();
        Ok(execution::run_on(
            &mut store,
            &fns,
            execution::Job::plain(script, limits, host),
            started,
            stats,
        )
        .await
        .outcome)
    }

    /// Hands the instance to the reset thread, which builds its next
    /// realm and parks it.
    fn recycle(&self, warm: Warm) {
        let Ok(permit) = self.inner.reset_slots.clone().try_acquire_owned() else {
            return; // enough instances already in transit; let this one go
        };
        self.inner.resetting.send_modify(|n| *n += 1);
        let job = Reset {
            warm: Some(warm),
            permit: Some(permit),
            inner: Arc::downgrade(&self.inner),
        };
        if self.inner.resets.send(job).is_err() {
            // The reset thread is gone: the job (and its instance) is
            // dropped, which stops counting it.
            tracing::error!("the reset thread has stopped; reuse falls back to fresh instances");
        }
    }
}

/// The tool host of a script that is only parsed: nothing calls it.
struct NoTools;

#[async_trait::async_trait]
impl ToolHost for NoTools {
    async fn call(&self, _call: crate::ToolCall) -> Result<serde_json::Value, crate::ToolFailure> {
        Err(crate::ToolFailure::new(
            crate::codes::NOT_FOUND,
            "a script being checked calls no tool",
        ))
    }
}

/// Starts the thread that gives reused instances their next realm, one at
/// a time, at a low CPU priority ([`RESET_NICE`], on Linux). Building a realm
/// costs about a millisecond of CPU; run as tasks on the runtime that
/// serves executions, resets queued ahead of them, and an execution that
/// yielded at an epoch tick waited behind up to two ticks of reset work:
/// reuse had p99 spikes of 4–5 ms where fresh had 0.2 ms. On a thread of
/// its own, the OS prefers executions; a reset starved past its deadline
/// fails, and its instance is dropped.
fn reset_thread(queue: std::sync::mpsc::Receiver<Reset>) -> Result<(), SandboxError> {
    let (started, ready) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("airlock-reset".into())
        .spawn(move || {
            lower_priority();
            // Built here, so a thread that cannot start drops no runtime
            // inside the caller's async context.
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
            {
                Ok(r) => {
                    let _ = started.send(Ok(()));
                    r
                }
                Err(e) => {
                    let _ = started.send(Err(e.to_string()));
                    return;
                }
            };
            while let Ok(mut job) = queue.recv() {
                // Nobody left to hand it to: no reset.
                if job.inner.strong_count() == 0 {
                    continue;
                }
                let reset = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let warm = job.warm.as_mut().expect("a queued job holds its instance");
                    runtime.block_on(execution::reset(&mut warm.store, &warm.fns))
                }));
                match reset {
                    Ok(true) => job.park(),
                    Ok(false) => {}
                    Err(_) => tracing::error!(
                        "resetting a reused instance panicked; the instance is dropped"
                    ),
                }
            }
        })
        .map_err(|e| SandboxError::ResetThread(e.to_string()))?;
    match ready.recv() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(SandboxError::ResetThread(e)),
        Err(_) => Err(SandboxError::ResetThread(
            "the thread ended at start".into(),
        )),
    }
}

/// The reset thread's nice value. At 19, the lowest priority, a reset
/// gets about 1.5% of a core against each busy thread at nice 0, and on a
/// loaded machine missed its 200 ms deadline, dropping the instance; at 10
/// it gets about a tenth, and the OS still runs executions first.
#[cfg(target_os = "linux")]
const RESET_NICE: libc::c_int = 10;

/// [`RESET_NICE`] for the calling thread: on Linux a thread id is a process id
/// for `setpriority`, and nice is per thread. Elsewhere the thread keeps
/// the default priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid cannot fail and setpriority has no memory-safety
    // preconditions; a failure leaves the default priority, which is only
    // slower for executions.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, RESET_NICE);
    }
}

impl Reset {
    /// Puts the reset instance in the warm pool; the instance it pushes
    /// out, if any, is dropped after the lock is released (dropping a
    /// store clears its memory, which must not hold up `take_warm`).
    fn park(&mut self) {
        let (Some(inner), Some(warm)) = (self.inner.upgrade(), self.warm.take()) else {
            return;
        };
        let evicted = {
            let mut pool = inner.warm.lock().unwrap_or_else(|p| p.into_inner());
            pool.push(warm);
            // The pool holds at most one instance per slot; the one idle
            // longest (of whichever principal) makes room.
            (pool.len() > inner.config.capacity.executions_in_flight as usize)
                .then(|| pool.remove(0))
        };
        drop(evicted);
    }
}

/// However a job ends (parked, failed, discarded, panicked, never sent),
/// its permit is released and `settle` stops counting it.
impl Drop for Reset {
    fn drop(&mut self) {
        drop(self.warm.take());
        drop(self.permit.take());
        if let Some(inner) = self.inner.upgrade() {
            inner.resetting.send_modify(|n| *n -= 1);
        }
    }
}

fn failed(e: ExecError, stats: Stats) -> Outcome {
    Outcome {
        result: Err(e),
        truncated: None,
        logs: Vec::new(),
        logs_truncated: None,
        trace: Vec::new(),
        stats,
    }
}

/// Advances the engine's epoch every [`TICK`] for as long as the engine
/// lives; guest code checks its deadline (and yields) on each tick.
fn start_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("airlock-epoch".into())
        .spawn(move || loop {
            std::thread::sleep(TICK);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
        })
        .expect("spawning the epoch thread");
}
