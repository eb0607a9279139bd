//! The `airlock` host imports: the guest's only way to reach the host. See
//! `airlock_guest_sdk::abi` for the contract; every pointer is checked in
//! [`crate::memory`].

use airlock_guest_sdk::{
    abi::{
        self, Completion, LogLevel, FINISH_ERROR, FINISH_OK, IMPORT_MODULE, TRAP_LIMIT, WAIT_IDLE,
        WAIT_READY,
    },
    wire,
};
use wasmtime::{Caller, Linker};

use crate::{
    limits::Limit,
    memory::{self, violation},
    outcome::{CallRecord, ExecError, LogEntry},
    store::{Request, RunState, StoreData},
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
            let name = memory::read(&mut c, name_ptr, name_len)?;
            let args = memory::read(&mut c, args_ptr, args_len)?;
            let (name, args) = wire::call(name, &args).map_err(|v| violation(&v.to_string()))?;
            let run = run_state(&mut c)?;
            if run.calls_started >= run.limits.tool_calls {
                let value = run.limits.tool_calls as u64;
                run.limit_hit = Some(ExecError::limit(Limit::ToolCalls, value, value + 1));
                return Err(limit_trap());
            }
            run.calls_started += 1;
            let id = run.take_id();
            run.outstanding.insert(id);
            let start_us = run.started.elapsed().as_micros() as u64;
            run.trace.lock().unwrap().push((
                id,
                CallRecord {
                    tool: name.clone(),
                    start_us,
                    duration_us: None,
                    status: "cancelled".into(),
                },
            ));
            let _ = run.requests.send(Request::Call { id, name, args });
            Ok(id)
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_TIMER_START,
        |mut c: Caller<'_, StoreData>, delay_ms: u32| {
            let run = run_state(&mut c)?;
            let id = run.take_id();
            run.outstanding.insert(id);
            let _ = run.requests.send(Request::Timer { id, delay_ms });
            Ok(id)
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_CANCEL,
        |mut c: Caller<'_, StoreData>, id: u32| {
            let run = run_state(&mut c)?;
            if run.outstanding.remove(&id) {
                let _ = run.requests.send(Request::Cancel { id });
            }
            Ok(())
        },
    )?;

    linker.func_wrap_async(
        IMPORT_MODULE,
        abi::IMPORT_WAIT,
        |mut c: Caller<'_, StoreData>, (out_ptr,): (u32,)| {
            Box::new(async move {
                let done = loop {
                    let run = run_state(&mut c)?;
                    if run.outstanding.is_empty() {
                        return Ok(WAIT_IDLE);
                    }
                    let deadline = run.started + run.limits.wall_time();
                    match tokio::time::timeout_at(deadline.into(), run.completions.recv()).await {
                        Err(_) => {
                            run.wall_time_exceeded();
                            return Err(limit_trap());
                        }
                        Ok(None) => return Err(violation("the tool dispatcher stopped")),
                        Ok(Some(done)) if run.outstanding.remove(&done.id) => break done,
                        Ok(Some(_)) => continue, // cancelled meanwhile
                    }
                };
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
            let run = run_state(&mut c)?;
            run.log_bytes_total += len as u64;
            if run.log_bytes_kept + len as u64 > run.limits.log_bytes {
                return Ok(()); // dropped and counted; reported in the outcome
            }
            let bytes = memory::read(&mut c, ptr, len)?;
            let run = run_state(&mut c)?;
            run.log_bytes_kept += len as u64;
            run.logs.push(LogEntry {
                level: level.into(),
                message: String::from_utf8_lossy(&bytes).into_owned(),
            });
            Ok(())
        },
    )?;

    linker.func_wrap(
        IMPORT_MODULE,
        abi::IMPORT_FINISH,
        |mut c: Caller<'_, StoreData>, status: u32, ptr: u32, len: u32| {
            if status != FINISH_OK && status != FINISH_ERROR {
                return Err(violation("unknown finish status"));
            }
            if run_state(&mut c)?.finished.is_some() {
                return Err(violation("finish called twice"));
            }
            let bytes = memory::read(&mut c, ptr, len)?;
            run_state(&mut c)?.finished = Some((status, bytes));
            Ok(())
        },
    )?;
    Ok(())
}
