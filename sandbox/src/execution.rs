//! One execution on one instance: set up the per-run state, run the guest
//! alongside the tool dispatcher under the wall-clock budget, and turn
//! whatever happened into an [`Outcome`].

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use airlock_guest_sdk::{
    abi::{EXPORT_RESET, EXPORT_RUN, JS_STACK_SIZE, RECURSION_DEPTH},
    fit,
    wire::{self, Finished, GuestError},
};
use serde_json::Value;
use tokio::sync::mpsc::unbounded_channel;
use wasmtime::{Instance, Store, Trap, TypedFunc};

use crate::{
    dispatch,
    engine::MAX_WASM_STACK,
    limits::{Limit, Limits},
    outcome::{ExecError, Outcome, Stats, Truncation},
    store::{Failures, RunState, StoreData},
    tool_host::{codes, ToolFailure, ToolHost},
};

/// Slack after the deadline before the host stops waiting on the guest at
/// all; normally the guest is stopped by the epoch check or by `wait`.
const HOST_GRACE: Duration = Duration::from_millis(250);

/// The guest exports one execution needs.
#[derive(Clone)]
pub struct GuestFns {
    pub run: TypedFunc<(u32, u32, u32), ()>,
    pub reset: TypedFunc<(), ()>,
}

impl GuestFns {
    pub fn new(store: &mut Store<StoreData>, instance: &Instance) -> wasmtime::Result<Self> {
        Ok(Self {
            run: instance.get_typed_func(&mut *store, EXPORT_RUN)?,
            reset: instance.get_typed_func(&mut *store, EXPORT_RESET)?,
        })
    }
}

/// What a run did to its instance.
pub struct RunReport {
    pub outcome: Outcome,
    /// The instance must not serve another execution.
    pub poisoned: bool,
}

/// What one run is asked to do.
pub struct Job<'a> {
    pub script: &'a str,
    pub limits: &'a Limits,
    pub host: &'a dyn ToolHost,
    /// Set for a journaled (durable) execution.
    pub recorder: Option<crate::replay::Shared>,
    /// The guest's `RUN_*` flags: how the script may be written, and
    /// whether it only is parsed.
    pub flags: u32,
}

impl<'a> Job<'a> {
    /// A run that records nothing.
    pub fn plain(script: &'a str, limits: &'a Limits, host: &'a dyn ToolHost) -> Self {
        Self {
            script,
            limits,
            host,
            recorder: None,
            flags: 0,
        }
    }
}

pub async fn run_on(
    store: &mut Store<StoreData>,
    fns: &GuestFns,
    job: Job<'_>,
    started: Instant,
    mut stats: Stats,
) -> RunReport {
    let Job {
        script,
        limits,
        host,
        recorder,
        flags,
    } = job;
    let (req_tx, req_rx) = unbounded_channel();
    let (done_tx, done_rx) = unbounded_channel();
    let current_memory = store
        .data()
        .memory
        .map(|m| m.data_size(&*store) as u64)
        .unwrap_or(0);
    {
        let data = store.data_mut();
        data.memory_limit = limits.memory_bytes;
        data.memory_denied = None;
        data.peak_memory = current_memory;
        data.deadline = Some(started + limits.wall_time());
        // A fresh context per execution (a few microseconds; a new
        // instance has one already): a reused instance's output, or
        // descriptors the guest renumbered, never reach the next script.
        // A journaled execution's clocks and randomness go through its
        // recorder.
        if let Some(r) = &recorder {
            data.system = crate::wasi::GuestSystem::journaled(r.clone());
        } else if stats.instance_uses > 1 {
            data.system = crate::wasi::GuestSystem::new();
        }
        let mut run = RunState::new(
            script.as_bytes().to_vec(),
            limits.clone(),
            started,
            req_tx,
            done_rx,
        );
        run.recorder = recorder.clone();
        data.run = Some(run);
    }
    // A metered engine always gets fuel: the budget, or (no `fuel` limit)
    // all there is, so metering without a budget measures and never stops
    // a script. `get_fuel` fails only on an engine without metering.
    let metered = store.get_fuel().is_ok();
    let fuel_given = limits.fuel.unwrap_or(u64::MAX);
    if metered {
        let _ = store.set_fuel(fuel_given);
    }
    store.set_epoch_deadline(1);

    let (trace, failures, backlog) = {
        let run = store.data().run.as_ref().expect("set above");
        (run.trace.clone(), run.failures.clone(), run.backlog.clone())
    };
    let peak_in_flight = AtomicU32::new(0);
    let result_bytes = u32::try_from(limits.result_bytes).unwrap_or(u32::MAX);
    let result = {
        let wasm = fns
            .run
            .call_async(&mut *store, (script.len() as u32, result_bytes, flags));
        let dispatcher = dispatch::run(
            host,
            req_rx,
            done_tx,
            limits,
            started,
            dispatch::Records {
                trace: &trace,
                failures: &failures,
                peak_in_flight: &peak_in_flight,
                backlog: &backlog,
                parks: recorder.is_some(),
                journal: recorder
                    .as_ref()
                    .map(crate::tool_host::JournalTap::of)
                    .unwrap_or_default(),
            },
        );
        let backstop = tokio::time::sleep_until((started + limits.wall_time() + HOST_GRACE).into());
        tokio::select! {
            biased;
            r = crate::turns::Together::new(wasm, dispatcher) => Some(r),
            _ = backstop => None,
        }
    };

    let fuel_used = metered.then(|| fuel_given.saturating_sub(store.get_fuel().unwrap_or(0)));
    let data = store.data_mut();
    data.deadline = None;
    let run = data.run.take().expect("set above");
    // Calls made on a call's behalf (a runbook's) count as the script's.
    let nested = crate::tool_host::nested_calls(&run.trace);
    stats.tool_calls = run.calls_started.saturating_add(nested);
    stats.peak_calls_in_flight = peak_in_flight.load(Ordering::Relaxed);
    stats.peak_memory_bytes = data.peak_memory;
    stats.fuel_used = fuel_used;
    stats.wall_us = started.elapsed().as_micros() as u64;

    let mut poisoned = true;
    let mut truncated = None;
    let mut result: Result<Value, ExecError> = match result {
        None => Err(ExecError::limit(
            Limit::WallTimeMs,
            limits.wall_time_ms,
            started.elapsed().as_millis() as u64,
        )),
        Some(Ok(())) => match run.finished {
            Some((status, bytes)) => {
                poisoned = false;
                decode_finish(status, &bytes, &failures, limits).map(|(value, original)| {
                    truncated = original.map(|original_bytes| Truncation {
                        limit: Limit::ResultBytes,
                        value: limits.result_bytes,
                        original_bytes,
                    });
                    value
                })
            }
            None => Err(ExecError::Internal {
                message: "the guest returned without reporting an outcome".into(),
            }),
        },
        Some(Err(trap)) => Err(classify_trap(trap, run.limit_hit, data, limits, fuel_used)),
    };
    // The recorder's finding wins: a clock read that diverged cannot stop
    // the guest itself, and what the script made of it is not its result.
    if let Some(e) = recorder.as_ref().and_then(|r| r.lock().ok()?.error()) {
        result = Err(e);
    }
    if let Err(ExecError::LimitExceeded { .. } | ExecError::ReplayDiverged { .. }) = &result {
        poisoned = true; // a limit leaves the realm in an unknown state
    }

    let logs_truncated = (run.logs_dropped > 0).then_some(Truncation {
        limit: Limit::LogBytes,
        value: limits.log_bytes,
        original_bytes: run.log_bytes_total,
    });
    let mut trace: Vec<_> = std::mem::take(&mut *trace.lock().unwrap());
    trace.sort_by_key(|(id, _)| *id);
    RunReport {
        outcome: Outcome {
            result,
            truncated,
            logs: run.logs,
            logs_truncated,
            trace: trace.into_iter().map(|(_, r)| r).collect(),
            stats,
        },
        poisoned,
    }
}

/// Longest a realm rebuild may take (it takes about a millisecond); a
/// guest that overruns is discarded, so a corrupted guest cannot spend
/// host time between executions.
const RESET_DEADLINE: Duration = Duration::from_millis(200);

/// Prepares a reused instance for its next script (`airlock_reset`).
pub async fn reset(store: &mut Store<StoreData>, fns: &GuestFns) -> bool {
    store.data_mut().deadline = Some(Instant::now() + RESET_DEADLINE);
    store.set_epoch_deadline(1);
    // The epoch deadline stops guest code; a guest waiting in the host
    // (a WASI `poll_oneoff` sleep) is stopped by the clock here, and the
    // instance is then discarded.
    let ok = matches!(
        tokio::time::timeout(
            RESET_DEADLINE + HOST_GRACE,
            fns.reset.call_async(&mut *store, ())
        )
        .await,
        Ok(Ok(()))
    );
    store.data_mut().deadline = None;
    ok
}

fn classify_trap(
    trap: wasmtime::Error,
    limit_hit: Option<ExecError>,
    data: &StoreData,
    limits: &Limits,
    fuel_used: Option<u64>,
) -> ExecError {
    if let Some(e) = limit_hit {
        return e;
    }
    if let Some(desired) = data.memory_denied {
        return ExecError::limit(Limit::MemoryBytes, limits.memory_bytes, desired);
    }
    match trap.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => {
            let value = limits.fuel.unwrap_or(0);
            return ExecError::limit(Limit::Fuel, value, fuel_used.unwrap_or(value).max(value));
        }
        Some(Trap::StackOverflow) => {
            return ExecError::limit(
                Limit::StackBytes,
                MAX_WASM_STACK as u64,
                MAX_WASM_STACK as u64,
            );
        }
        Some(Trap::Interrupt) => {
            return ExecError::limit(Limit::WallTimeMs, limits.wall_time_ms, limits.wall_time_ms);
        }
        // The guest's own stack lives at the bottom of its memory (linked
        // stack-first): nesting deeper than it holds (a parser's
        // recursion over a deeply nested script) moves its pointer below
        // zero, and the first access faults just under 4 GiB. That is the
        // script's depth, not a fault of the runtime.
        Some(Trap::MemoryOutOfBounds) if shadow_stack_overflow(&format!("{trap:?}")) => {
            tracing::debug!(error = %format!("{trap:?}"), "the guest's own stack overflowed");
            return ExecError::limit(Limit::StackBytes, GUEST_STACK_BYTES, GUEST_STACK_BYTES);
        }
        _ => {}
    }
    let output = data.system.output();
    let output = String::from_utf8_lossy(&output);
    let output = output.trim();
    // The guest's allocator gives up (and Rust aborts) when a script asks
    // for more than a 32-bit address space or than memory.grow allows.
    if output.contains("capacity overflow") {
        return ExecError::limit(
            Limit::MemoryBytes,
            limits.memory_bytes,
            crate::limits::MAX_MEMORY_BYTES,
        );
    }
    // Believed only when it is plausible: the memory held plus the request
    // passes the limit (the guest's text is not the host's decision).
    if let Some(bytes) = allocation_failure(output) {
        let used = data.peak_memory.saturating_add(bytes);
        if used > limits.memory_bytes {
            return ExecError::limit(Limit::MemoryBytes, limits.memory_bytes, used);
        }
    }
    // What the guest wrote is shown with its control characters escaped:
    // it must not forge log lines or terminal output.
    tracing::warn!(error = %format!("{trap:?}"), guest_output = %output.escape_default(), "sandbox guest trapped");
    let what = match trap.downcast_ref::<Trap>() {
        Some(t) => t.to_string(),
        None => trap.root_cause().to_string(),
    };
    let mut message = format!("the JavaScript runtime stopped: {what}");
    let mut lines = output.lines();
    let first = lines.next().unwrap_or("");
    let shown = match lines.next().filter(|_| output.starts_with("thread")) {
        Some(panic) => panic,
        None => first,
    };
    if !output.is_empty() {
        message.push_str(&format!(" ({})", shown.trim().escape_default()));
    }
    ExecError::Internal { message }
}

/// The guest's own (shadow) stack, at the bottom of its memory: 1 MiB,
/// the size Rust links `wasm32-wasip1` programs with.
const GUEST_STACK_BYTES: u64 = 1 << 20;

/// Whether a memory fault is the guest's own stack run past its bottom:
/// its pointer wrapped below zero, so the faulting address lies within a
/// stack's reach under 4 GiB, or a frame's offset (under 64 KiB) past it
/// (an address a 32-bit memory never has).
fn shadow_stack_overflow(trap: &str) -> bool {
    let Some(rest) = trap.split("wasm address 0x").nth(1) else {
        return false;
    };
    let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex, 16)
        .is_ok_and(|a| ((1u64 << 32) - GUEST_STACK_BYTES..(1u64 << 32) + (64 << 10)).contains(&a))
}

/// Parses Rust's "memory allocation of N bytes failed".
fn allocation_failure(output: &str) -> Option<u64> {
    let rest = output.split("memory allocation of ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// Turns the guest's `finish` payload into the execution's result: the
/// value, with its original size when the guest cut it, or an error.
fn decode_finish(
    status: u32,
    bytes: &[u8],
    failures: &Failures,
    limits: &Limits,
) -> Result<(Value, Option<u64>), ExecError> {
    match wire::finish(status, bytes) {
        Ok(Finished::Error(e)) => Err(guest_error(e, failures, limits)),
        Ok(Finished::Value(v)) if fit::json_len(&v) as u64 > limits.result_bytes => {
            // Only a guest that broke the ABI sends an uncut value this big.
            Err(ExecError::Internal {
                message: "the guest reported a result larger than result_bytes".into(),
            })
        }
        Ok(Finished::Value(v)) => Ok((v, None)),
        Ok(Finished::Truncated {
            value,
            original_bytes,
        }) => Ok((value, Some(original_bytes))),
        Err(violation) => Err(ExecError::Internal {
            message: violation.to_string(),
        }),
    }
}

fn guest_error(e: GuestError, failures: &Failures, limits: &Limits) -> ExecError {
    match e {
        GuestError::Syntax {
            line,
            column,
            message,
        } => ExecError::SyntaxError {
            line,
            column,
            message,
        },
        GuestError::Runtime { message, stack } => ExecError::RuntimeError { message, stack },
        // Only the JS engine's own two limits can come from the guest, and
        // with the values the host knows, not the guest's.
        GuestError::EngineLimit { limit, .. } => match limit.as_str() {
            "recursion_depth" => {
                let value = RECURSION_DEPTH as u64;
                ExecError::limit(Limit::RecursionDepth, value, value + 1)
            }
            "js_stack_size" => {
                let value = JS_STACK_SIZE as u64;
                ExecError::limit(Limit::JsStackSize, value, value + 1)
            }
            _ => ExecError::Internal {
                message: format!(
                    "the guest reported an engine limit `{}` it does not have",
                    fit::capped(&limit)
                ),
            },
        },
        GuestError::Tool {
            call,
            tool,
            code,
            message,
        } => match call.and_then(|id| failures.lock().unwrap().remove(&id)) {
            Some((tool, failure)) => tool_error(tool, failure, limits),
            // Not a failure the host reported: whatever the script threw,
            // it carries no authority.
            None => ExecError::RuntimeError {
                message: fit::capped(&format!("Uncaught ToolError: {tool}: {message} ({code})")),
                stack: None,
            },
        },
        GuestError::Unknown(text) => ExecError::Internal {
            message: format!("the guest reported an unknown error: {text}"),
        },
    }
}

/// An uncaught tool failure, as the host recorded it; some codes have a kind
/// of their own. Its details are cut like a result.
fn tool_error(tool: String, failure: ToolFailure, limits: &Limits) -> ExecError {
    let ToolFailure {
        code,
        message,
        details,
    } = failure;
    let message = fit::capped(&message);
    let details = if fit::json_len(&details) as u64 > limits.result_bytes {
        fit::truncate(&details, limits.result_bytes as usize)
    } else {
        details
    };
    match code.as_str() {
        codes::POLICY_DENIED | codes::APPROVAL_DENIED => ExecError::PolicyDenied {
            tool,
            reason: message,
        },
        codes::APPROVAL_REQUIRED => {
            let field = |k: &str| details.get(k).and_then(Value::as_str).map(str::to_string);
            match (field("request_id"), field("how")) {
                (Some(request_id), Some(how)) => ExecError::ApprovalRequired {
                    tool,
                    request_id,
                    how,
                },
                _ => ExecError::ToolError {
                    tool,
                    code,
                    message,
                    details,
                },
            }
        }
        codes::LIMIT_EXCEEDED => {
            let limit = details
                .get("limit")
                .cloned()
                .and_then(|l| serde_json::from_value::<Limit>(l).ok());
            let num = |k: &str| details.get(k).and_then(Value::as_u64);
            match (limit, num("value"), num("used")) {
                (Some(limit), Some(value), Some(used)) => ExecError::limit(limit, value, used),
                _ => ExecError::ToolError {
                    tool,
                    code,
                    message,
                    details,
                },
            }
        }
        _ => ExecError::ToolError {
            tool,
            code,
            message,
            details,
        },
    }
}
