//! Runs the tool calls and timers a script started, concurrently with the
//! script itself, and reports each completion back to the guest's `wait`.
//!
//! The dispatcher is polled in the same task as the wasm call (no spawning),
//! so it can borrow the `ToolHost` and everything it starts is dropped —
//! cancelled — the moment the execution ends. Calls beyond
//! `calls_in_flight` wait in order for a free slot. A cleared timer is
//! dropped at once, so arming and clearing timers in a loop holds nothing.

use std::{
    collections::{HashMap, VecDeque},
    future::Future,
    pin::Pin,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use airlock_guest_sdk::abi::{STATUS_OK, STATUS_TIMER, STATUS_TOOL_ERROR};
use futures::{
    future::{abortable, AbortHandle},
    stream::FuturesUnordered,
    StreamExt,
};
use serde_json::{json, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::{
    limits::{Limit, Limits},
    store::{Done, Failures, Request, STATUS_WAITING},
    tool_host::{codes, CallNote, JournalTap, ToolCall, ToolFailure, ToolHost, Trace},
};

enum Finished {
    Call {
        id: u32,
        tool: String,
        result: Result<Value, ToolFailure>,
    },
    Timer {
        id: u32,
    },
    /// A timer cleared before it fired.
    Dropped,
}

/// Longest one poll of the dispatcher goes on before it yields.
const POLL_TIME_NS: u64 = 1_000_000;

type Running<'a> = Pin<Box<dyn Future<Output = Finished> + Send + 'a>>;

/// What the dispatcher writes down that outlives it: the execution reads it
/// after the dispatcher is dropped.
pub struct Records<'a> {
    pub trace: &'a Trace,
    pub failures: &'a Failures,
    pub peak_in_flight: &'a AtomicU32,
    /// Payload bytes sent to the guest and not yet taken (see
    /// `RunState::backlog`).
    pub backlog: &'a AtomicU64,
    /// The execution is journaled: a call answered `codes::WAITING` waits
    /// (the execution may park) instead of failing.
    pub parks: bool,
    /// Its journal, handed to each call.
    pub journal: JournalTap,
}

pub async fn run(
    host: &dyn ToolHost,
    mut requests: UnboundedReceiver<Request>,
    completions: UnboundedSender<Done>,
    limits: &Limits,
    started: Instant,
    records: Records<'_>,
) {
    let Records {
        trace,
        failures,
        peak_in_flight,
        backlog,
        parks,
        journal,
    } = records;
    let send = |done: Done| {
        backlog.fetch_add(done.payload.len() as u64, Ordering::Relaxed);
        completions.send(done).is_ok()
    };
    let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
    // FuturesUnordered yields (wakes its task and answers Pending) each
    // time it has polled as many futures as it holds, which with one call
    // in flight is every poll that leaves the call waiting; the execution
    // (`turns`) hands such a yield to tokio, which queues the task behind
    // others and wakes an idle worker to steal it: 2.4 context switches a
    // backend call instead of 1.4 (benches/peer/call_cost.py). A future
    // that is never ready, polled once and never woken, keeps that count
    // one above what can be polled. The set still yields when calls wake
    // themselves twice while polled (tokio's cooperative budget does; a
    // runbook's guest yielding inside a call does, so that guest runs at
    // most two epoch ticks in one poll), so it cannot keep the thread.
    running.push(Box::pin(std::future::pending()));
    let mut queued: VecDeque<(u32, String, Value, bool)> = VecDeque::new();
    let mut timers: HashMap<u32, AbortHandle> = HashMap::new();
    let mut in_flight: u32 = 0;
    let max_in_flight = limits.calls_in_flight.max(1);
    let call_timeout = limits.call_timeout();

    let start_call = |id: u32, name: String, args: Value, resumed: bool| -> Running<'_> {
        let begun = Instant::now();
        // The record exists since the script made the call; it starts now
        // (after any wait for a free slot).
        if let Some((_, rec)) = trace
            .lock()
            .unwrap()
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == id)
        {
            rec.start_us = begun.duration_since(started).as_micros() as u64;
        }
        let note = CallNote::of(trace, id);
        let journal = journal.clone();
        Box::pin(async move {
            let call = ToolCall {
                name: name.clone(),
                args,
                note,
                resumed,
                journal,
            };
            let result = match tokio::time::timeout(call_timeout, host.call(call)).await {
                Ok(r) => r,
                Err(_) => Err(call_timeout_failure(&name, call_timeout, begun.elapsed())),
            };
            Finished::Call {
                id,
                tool: name,
                result,
            }
        })
    };

    // When this poll of the loop began, in ns since `started`.
    let poll_began = AtomicU64::new(0);
    let since_start = || started.elapsed().as_nanos() as u64;
    let serving = async {
        loop {
            // A call that wakes itself while polled (a runbook's guest
            // yielding, a host whose answer is ready at once) is polled
            // again on each turn of this loop, and a turn follows every
            // completion: timers firing one after another while a runbook
            // ran kept one poll going ~250 ms (the attacker review). Past
            // POLL_TIME the loop yields to the runtime.
            if since_start() > poll_began.load(Ordering::Relaxed) + POLL_TIME_NS {
                tokio::task::yield_now().await;
            }
            tokio::select! {
                // A guest makes thousands of requests between two polls
                // (setTimeout/clearTimeout in a loop). All of them are
                // taken in one go, outside tokio's cooperative budget:
                // 128 a poll let them pile up in the channel, and going
                // back to `select!` between two polls the running calls
                // again each time (a runbook's guest yielding inside a
                // call runs on each of those polls: 5,000 timers armed and
                // cleared held a worker 4.9 s).
                request = tokio::task::unconstrained(requests.recv()) => {
                    // `None`: the script is done.
                    let Some(mut request) = request else { match idle().await {} };
                    loop {
                        match request {
                            Request::Call { id, name, args, resumed } => {
                                if in_flight < max_in_flight {
                                    in_flight += 1;
                                    peak_in_flight.fetch_max(in_flight, Ordering::Relaxed);
                                    running.push(start_call(id, name, args, resumed));
                                } else {
                                    queued.push_back((id, name, args, resumed));
                                }
                            }
                            Request::Refused { id, name, failure } => {
                                let result = Err(failure);
                                record(trace, started, id, &result);
                                let done = settle(failures, id, &name, result);
                                if !send(done) {
                                    match idle().await {}
                                }
                            }
                            Request::Timer { id, delay_ms } => {
                                let delay = Duration::from_millis(delay_ms as u64);
                                let (sleep, handle) = abortable(tokio::time::sleep(delay));
                                timers.insert(id, handle);
                                running.push(Box::pin(async move {
                                    match sleep.await {
                                        Ok(()) => Finished::Timer { id },
                                        Err(_) => Finished::Dropped,
                                    }
                                }));
                            }
                            Request::Cancel { id } => {
                                if let Some(timer) = timers.remove(&id) {
                                    timer.abort();
                                }
                            }
                        }
                        match requests.try_recv() {
                            Ok(next) => request = next,
                            Err(_) => break,
                        }
                    }
                }
                Some(finished) = running.next() => {
                    let done = match finished {
                        Finished::Dropped => continue,
                        Finished::Timer { id } => {
                            if timers.remove(&id).is_none() {
                                continue; // cleared as it fired
                            }
                            Done { id, status: STATUS_TIMER, payload: Vec::new() }
                        }
                        Finished::Call { id, tool, result } => {
                            in_flight -= 1;
                            if let Some((next_id, name, args, resumed)) = queued.pop_front() {
                                in_flight += 1;
                                running.push(start_call(next_id, name, args, resumed));
                            }
                            record(trace, started, id, &result);
                            let waits = parks
                                && matches!(&result, Err(f) if f.code == codes::WAITING);
                            let done = settle(failures, id, &tool, result);
                            match waits {
                                true => Done { id, status: STATUS_WAITING, payload: Vec::new() },
                                false => done,
                            }
                        }
                    };
                    if !send(done) {
                        match idle().await {}
                    }
                    // Results the guest has not taken fill its memory budget:
                    // the execution ends at its next check (in `wait` or on the
                    // next epoch tick); until then nothing more is run.
                    if backlog.load(Ordering::Relaxed) > limits.memory_bytes {
                        match idle().await {}
                    }
                }
            }
        }
    };
    let mut serving = std::pin::pin!(serving);
    std::future::poll_fn(|cx| {
        poll_began.store(since_start(), Ordering::Relaxed);
        serving.as_mut().poll(cx)
    })
    .await
}

/// Waits for ever: the execution ends by dropping the dispatcher.
async fn idle() -> std::convert::Infallible {
    std::future::pending().await
}

fn record(trace: &Trace, started: Instant, id: u32, result: &Result<Value, ToolFailure>) {
    let now_us = started.elapsed().as_micros() as u64;
    let mut trace = trace.lock().unwrap();
    if let Some((_, rec)) = trace.iter_mut().rev().find(|(i, _)| *i == id) {
        rec.duration_us = Some(now_us.saturating_sub(rec.start_us));
        rec.status = match result {
            Ok(_) => "ok".into(),
            Err(f) => f.code.clone(),
        };
    }
}

/// Encodes a call's end for the guest, keeping the host's own record of a
/// failure: it is what the execution reports if the failure escapes.
fn settle(failures: &Failures, id: u32, tool: &str, result: Result<Value, ToolFailure>) -> Done {
    if let Err(f) = &result {
        failures
            .lock()
            .unwrap()
            .insert(id, (tool.to_string(), f.clone()));
    }
    encode(id, tool, result)
}

fn encode(id: u32, tool: &str, result: Result<Value, ToolFailure>) -> Done {
    match result {
        Ok(value) => Done {
            id,
            status: STATUS_OK,
            payload: serde_json::to_vec(&value).expect("a JSON value always serializes"),
        },
        Err(f) => Done {
            id,
            status: STATUS_TOOL_ERROR,
            payload: serde_json::to_vec(&json!({
                "tool": tool,
                "code": f.code,
                "message": f.message,
                "details": f.details,
            }))
            .expect("a JSON value always serializes"),
        },
    }
}

fn call_timeout_failure(tool: &str, limit: Duration, used: Duration) -> ToolFailure {
    let value = limit.as_millis() as u64;
    let used = (used.as_millis() as u64).max(value);
    ToolFailure::new(
        codes::LIMIT_EXCEEDED,
        format!("{tool} did not answer within call_timeout_ms = {value} (waited {used} ms); the call was abandoned"),
    )
    .with_details(json!({"limit": Limit::CallTimeoutMs, "value": value, "used": used}))
}
