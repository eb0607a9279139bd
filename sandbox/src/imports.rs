//! The `airlock` host imports: the guest's only way to reach the host. See
//! `airlock_guest_sdk::abi` for the contract; every pointer is checked in
//! [`crate::memory`].

use airlock_guest_sdk::{
    abi::{
        self, Completion, LogLevel, ARGS_VALUE_OVERHEAD, FINISH_ERROR, FINISH_OK, FINISH_SLACK,
        FINISH_TRUNCATED, IMPORT_MODULE, LOG_LINE_OVERHEAD, MAX_TOOL_NAME_BYTES, NAME_SHOWN_BYTES,
        TRAP_LIMIT, WAIT_IDLE, WAIT_READY,
    },
    wire,
};
use wasmtime::{Caller, Linker};

use crate::{
    limits::Limit,
    memory::{self, violation},
    outcome::LogEntry,
    store::{Pending, Request, RunState, StoreData},
    tool_host::{codes, ToolFailure},
};

fn run_state<'a>(caller: &'a mut Caller<'_, StoreData>) -> wasmtime::Result<&'a mut RunState> {
    caller
        .data_mut()
        .run
        .as_mut()
        .ok_or_else(|| violation("host import called outside an execution"))
}

fn limit_trap() -> wasmtime::Error {
    wasmtime::Error::msg(TRAP_LIMIT)
}

pub fn add_to_linker(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_SCRIPT_READ,
        |mut c: Caller<'_, StoreData>, ptr: u32, len: u32| {
            let script = std::mem::take(&mut run_state(&mut c)?.script);
            if script.len() != len as usize {
                return Err(violation("script_read length differs from the script's"));
            }
            memory::write(&mut c, ptr, &script)
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_CALL_START,
        |mut c: Caller<'_, StoreData>,
         name_ptr: u32,
         name_len: u32,
         args_ptr: u32,
         args_len: u32| {
            let run = run_state(&mut c)?;
            if run.calls_started >= run.limits.tool_calls {
                let value = run.limits.tool_calls as u64;
                run.hit(Limit::ToolCalls, value, value + 1);
                return Err(limit_trap());
            }
            if name_len > MAX_TOOL_NAME_BYTES {
                return refuse_long_name(&mut c, name_ptr, name_len);
            }
            // Charged before the host builds anything from them: first the
            // text (so the scan below is bounded), then the structure the
            // parser would build.
            let (charged, budget) = (run.args_bytes, run.limits.args_bytes);
            let over = |used: u64| used > budget;
            if over(charged + args_len as u64) {
                run.hit(Limit::ArgsBytes, budget, charged + args_len as u64);
                return Err(limit_trap());
            }
            let tokens = memory::with(&mut c, args_ptr, args_len, wire::json_tokens)?;
            let used = charged + args_len as u64 + tokens.saturating_mul(ARGS_VALUE_OVERHEAD);
            let run = run_state(&mut c)?;
            if over(used) {
                run.hit(Limit::ArgsBytes, budget, used);
                return Err(limit_trap());
            }
            run.args_bytes = used;
            let name = memory::read(&mut c, name_ptr, name_len)?;
            let (name, args) =
                memory::with(&mut c, args_ptr, args_len, |args| wire::call(name, args))?
                    .map_err(|v| violation(&v.to_string()))?;
            let run = run_state(&mut c)?;
            journal_gate(run)?;
            let shown = shown_name(&name);
            let id = run.start_call(shown.clone());
            let digest = run
                .recorder
                .is_some()
                .then(|| crate::journal::call_digest(&name, &args));
            let request = Request::Call {
                id,
                name,
                args,
                resumed: false,
            };
            journaled_call(run, id, &shown, digest, request)?;
            Ok(id)
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_TIMER_START,
        |mut c: Caller<'_, StoreData>, delay_ms: u32| {
            let run = run_state(&mut c)?;
            if run.timers_armed >= run.limits.timers {
                let value = run.limits.timers as u64;
                run.hit(Limit::Timers, value, value + 1);
                return Err(limit_trap());
            }
            journal_gate(run)?;
            run.drain();
            run.timers_armed += 1;
            let id = run.take_id();
            run.outstanding.insert(id, Pending::Timer);
            let replayed = run.recorder().map(|mut r| r.timer(id, delay_ms));
            match replayed {
                Some(Err(())) => return Err(stopped(run)),
                Some(Ok(Some(at_ms))) => {
                    run.resume.timers.insert(id, (delay_ms, at_ms));
                    return Ok(id);
                }
                Some(Ok(None)) | None => {}
            }
            let _ = run.requests.send(Request::Timer { id, delay_ms });
            Ok(id)
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_CANCEL,
        |mut c: Caller<'_, StoreData>, id: u32| {
            let run = run_state(&mut c)?;
            // Only timers can be cancelled; a call runs to its end.
            journal_gate(run)?;
            run.drain();
            if run.outstanding.get(&id) == Some(&Pending::Timer) {
                run.settle(id);
                // A timer the replay armed was never started.
                if run.resume.timers.remove(&id).is_none() {
                    let _ = run.requests.send(Request::Cancel { id });
                }
            }
            Ok(())
        },
    )?;

    linker.func_wrap_async(
        IMPORT_MODULE,
        abi::IMPORT_WAIT,
        |mut c: Caller<'_, StoreData>, (out_ptr,): (u32,)| {
            Box::new(async move {
                if let Some(ready) = replayed_done(&mut c, out_ptr)? {
                    return Ok(ready);
                }
                let done = loop {
                    let run = run_state(&mut c)?;
                    if let Some(done) = run.next_ready() {
                        break done;
                    }
                    if run.outstanding.is_empty() {
                        return Ok(WAIT_IDLE);
                    }
                    if run.park_if_only_waiting() {
                        return Err(limit_trap());
                    }
                    let deadline = run.started + run.limits.wall_time();
                    match tokio::time::timeout_at(deadline.into(), run.completions.recv()).await {
                        Err(_) => {
                            run.wall_time_exceeded();
                            return Err(limit_trap());
                        }
                        Ok(None) => return Err(violation("the tool dispatcher stopped")),
                        Ok(Some(done)) if run.waits(&done) => {}
                        Ok(Some(done)) if run.settle(done.id).is_some() => break done,
                        Ok(Some(done)) => run.unhold(&done), // cancelled meanwhile
                    }
                };
                let guest_memory = c.data().peak_memory;
                let run = run_state(&mut c)?;
                if !run.check_backlog(guest_memory) {
                    return Err(limit_trap());
                }
                run.unhold(&done);
                // Written down before the guest sees it.
                let kept = run
                    .recorder()
                    .map(|mut r| r.done(done.id, done.status, &done.payload));
                if kept == Some(false) {
                    return Err(stopped(run));
                }
                let completion = Completion {
                    id: done.id,
                    status: done.status,
                    len: u32::try_from(done.payload.len())
                        .map_err(|_| violation("payload larger than 4 GiB"))?,
                };
                run_state(&mut c)?.payload = done.payload;
                memory::write(&mut c, out_ptr, &completion.encode())?;
                Ok(WAIT_READY)
            })
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_PAYLOAD_READ,
        |mut c: Caller<'_, StoreData>, ptr: u32, len: u32| {
            let payload = std::mem::take(&mut run_state(&mut c)?.payload);
            if payload.len() != len as usize {
                return Err(violation(
                    "payload_read length differs from the completion's",
                ));
            }
            memory::write(&mut c, ptr, &payload)
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_LOG,
        |mut c: Caller<'_, StoreData>, level: u32, ptr: u32, len: u32| {
            let level = LogLevel::from_u32(level).ok_or_else(|| violation("unknown log level"))?;
            // A line is charged as the answer will carry it: escaped (a
            // control character is six bytes there). That is never less
            // than its raw length, so a line whose raw length does not fit
            // is dropped unread, charged what it is known to cost.
            let run = run_state(&mut c)?;
            let raw = len as u64 + LOG_LINE_OVERHEAD;
            if run.log_bytes_kept + raw > run.limits.log_bytes {
                run.drop_log(raw);
                return Ok(());
            }
            let bytes = memory::read(&mut c, ptr, len)?;
            let message = String::from_utf8_lossy(&bytes).into_owned();
            let charge = escaped_len(&message) as u64 + LOG_LINE_OVERHEAD;
            let run = run_state(&mut c)?;
            if run.log_bytes_kept + charge > run.limits.log_bytes {
                run.drop_log(charge);
                return Ok(());
            }
            run.log_bytes_total = run.log_bytes_total.saturating_add(charge);
            run.log_bytes_kept += charge;
            run.logs.push(LogEntry { level, message });
            Ok(())
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_FINISH,
        |mut c: Caller<'_, StoreData>, status: u32, ptr: u32, len: u32| {
            if !matches!(status, FINISH_OK | FINISH_ERROR | FINISH_TRUNCATED) {
                return Err(violation("unknown finish status"));
            }
            let run = run_state(&mut c)?;
            if run.finished.is_some() {
                return Err(violation("finish called twice"));
            }
            // The guest cuts its result to `result_bytes`; a longer outcome
            // is not read, let alone parsed.
            let value = run.limits.result_bytes;
            if len as u64 > value + FINISH_SLACK as u64 {
                run.hit(Limit::ResultBytes, value, len as u64);
                return Err(limit_trap());
            }
            let bytes = memory::read(&mut c, ptr, len)?;
            run_state(&mut c)?.finished = Some((status, bytes));
            Ok(())
        },
    )?;
    Ok(())
}

/// A tool name longer than any tool's: the call fails at once (catchably,
/// `not_found`) and counts against `tool_calls`, and the host reads only
/// enough of the name to show where it came from.
fn refuse_long_name(c: &mut Caller<'_, StoreData>, ptr: u32, len: u32) -> wasmtime::Result<u32> {
    memory::with(c, ptr, len, |_| ())?; // in bounds, like any other range
    let start = memory::with(c, ptr, NAME_SHOWN_BYTES, |b| {
        String::from_utf8_lossy(b).into_owned()
    })?;
    let shown = cut_escaped(start.trim_end_matches('\u{FFFD}'), len as usize);
    let failure = ToolFailure::new(
        codes::NOT_FOUND,
        format!(
            "no tool has a name this long: tool names are at most {MAX_TOOL_NAME_BYTES} bytes and this one is {len} (it starts `{shown}`); call a name that search returned"
        ),
    );
    let run = run_state(c)?;
    journal_gate(run)?;
    let id = run.start_call(shown.clone());
    let digest = run.recorder.is_some().then(|| "refused".to_string());
    let request = Request::Refused {
        id,
        name: shown.clone(),
        failure,
    };
    journaled_call(run, id, &shown, digest, request)?;
    Ok(id)
}

/// Ends the execution with what the recorder found.
fn stopped(run: &mut RunState) -> wasmtime::Error {
    run.recorder_stopped();
    limit_trap()
}

/// Before any import does its work in a journaled execution: stop if the
/// recorder found the replay diverging or the journal full (a clock or
/// random read can find it, but cannot stop the guest itself), and start
/// what the journal left pending once the replay has run out.
fn journal_gate(run: &mut RunState) -> wasmtime::Result<()> {
    if run.recorder.is_none() {
        return Ok(());
    }
    if run.recorder_stopped() {
        return Err(limit_trap());
    }
    run.go_live_if_due();
    Ok(())
}

/// Sends a call the script started, unless the journal being replayed
/// holds it: then it is kept to start if the journal shows no end of it.
fn journaled_call(
    run: &mut RunState,
    id: u32,
    shown: &str,
    digest: Option<String>,
    request: Request,
) -> wasmtime::Result<()> {
    let replayed = match digest {
        Some(digest) => run.recorder().map(|mut r| r.call(id, shown, digest)),
        None => None,
    };
    match replayed {
        Some(Err(())) => Err(stopped(run)),
        Some(Ok(true)) => {
            let request = match request {
                Request::Call { id, name, args, .. } => Request::Call {
                    id,
                    name,
                    args,
                    resumed: true,
                },
                other => other,
            };
            run.resume.calls.insert(id, request);
            Ok(())
        }
        Some(Ok(false)) | None => {
            let _ = run.requests.send(request);
            Ok(())
        }
    }
}

/// While a journal is replayed, `wait` answers from it: the next end it
/// holds, for a call or timer this run has pending, or the replay stops.
fn replayed_done(c: &mut Caller<'_, StoreData>, out_ptr: u32) -> wasmtime::Result<Option<u32>> {
    let run = run_state(c)?;
    journal_gate(run)?;
    let next = match run.recorder() {
        Some(mut r) => r.next_done(),
        None => return Ok(None),
    };
    let (id, status, payload) = match next {
        Err(()) => return Err(stopped(run)),
        Ok(None) => return Ok(None),
        Ok(Some(done)) => done,
    };
    if run.settle(id).is_none() {
        if let Some(mut r) = run.recorder() {
            r.unexpected_done(id);
        }
        return Err(stopped(run));
    }
    run.resume.calls.remove(&id);
    run.resume.timers.remove(&id);
    if status != abi::STATUS_TIMER {
        replayed_end(run, id, status, &payload);
    }
    let completion = Completion {
        id,
        status,
        len: payload.len() as u32,
    };
    run.payload = payload.into_bytes();
    memory::write(c, out_ptr, &completion.encode())?;
    Ok(Some(WAIT_READY))
}

/// A call's end as the journal holds it, in the trace and (a failure) in
/// the host's own record of failures, as the live end would have been.
fn replayed_end(run: &mut RunState, id: u32, status: u32, payload: &str) {
    let failure = (status == abi::STATUS_TOOL_ERROR)
        .then(|| serde_json::from_str::<serde_json::Value>(payload).ok())
        .flatten()
        .map(|v| {
            let text = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
            let details = v.get("details").cloned().unwrap_or_default();
            (
                text("tool"),
                ToolFailure::new(text("code"), text("message")).with_details(details),
            )
        });
    let mut trace = run.trace.lock().unwrap();
    if let Some((_, rec)) = trace.iter_mut().rev().find(|(i, _)| *i == id) {
        rec.duration_us = Some(0);
        rec.replayed = true;
        rec.status = match &failure {
            None => "ok".into(),
            Some((_, f)) => f.code.clone(),
        };
    }
    drop(trace);
    if let Some(f) = failure {
        run.failures.lock().unwrap().insert(id, f);
    }
}

/// The length of `s` as a JSON string's contents: what a console line
/// costs in the answer.
fn escaped_len(s: &str) -> usize {
    s.chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum()
}

/// How many characters of a tool name the trace and messages show.
const NAME_SHOWN_CHARS: usize = 64;

/// A tool name as the trace and every message about it show it: as it is
/// when it looks like a name (short, printable ASCII), else escaped and cut
/// to 64 characters, so a script's name cannot grow an answer or carry
/// terminal controls.
fn shown_name(name: &str) -> String {
    if name.len() <= NAME_SHOWN_CHARS && name.bytes().all(|b| b.is_ascii_graphic()) {
        return name.to_string();
    }
    let escaped: String = name
        .chars()
        .flat_map(char::escape_default)
        .take(NAME_SHOWN_CHARS + 1)
        .collect();
    if escaped.chars().count() <= NAME_SHOWN_CHARS {
        return escaped;
    }
    cut_escaped(name, name.len())
}

/// `start` of a name of `bytes` bytes, escaped and cut to 64 characters,
/// with the name's real length.
fn cut_escaped(start: &str, bytes: usize) -> String {
    let cut: String = start
        .chars()
        .flat_map(char::escape_default)
        .take(NAME_SHOWN_CHARS)
        .collect();
    format!("{cut}… ({bytes} bytes)")
}
