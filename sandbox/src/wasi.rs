//! The handful of WASI preview-1 functions Rust's standard library imports
//! in the guest, implemented here so the guest gets exactly these and no
//! more: randomness, the clock, an empty environment, and stdout/stderr
//! captured (for crash reports) instead of written anywhere. There is no
//! filesystem, no sockets, no `poll`: those functions are not linked at all,
//! so a guest that imported them would fail to load.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use wasmtime::{Caller, Linker};

use crate::{memory, store::StoreData};

const MODULE: &str = "wasi_snapshot_preview1";

const ERRNO_SUCCESS: i32 = 0;
const ERRNO_BADF: i32 = 8;
const ERRNO_INVAL: i32 = 28;
const ERRNO_NOTSUP: i32 = 58;

const CLOCK_REALTIME: i32 = 0;
const CLOCK_MONOTONIC: i32 = 1;

/// Guest stdout/stderr kept for diagnosing a crash (a panic message).
pub const CAPTURE_LIMIT: usize = 4096;

/// Most bytes one `random_get` fills.
const RANDOM_MAX: u32 = 1 << 20;

/// Most buffers one `fd_write` may name (POSIX's `IOV_MAX`): the host walks
/// the list, so its length is the guest's to choose only up to here.
const IOV_MAX: u32 = 1024;

pub fn add_to_linker(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    linker.func_wrap(
        MODULE,
        "random_get",
        |mut c: Caller<'_, StoreData>, ptr: u32, len: u32| {
            // Filled in place: the range is checked against guest memory
            // first, and the host allocates nothing for it. The standard
            // library asks for a few bytes at a time; a megabyte is
            // already far more, and bounds the host's time here.
            if len > RANDOM_MAX {
                return Ok(ERRNO_INVAL);
            }
            memory::with_mut(&mut c, ptr, len, getrandom::fill)?
                .map_err(|e| wasmtime::Error::msg(format!("host randomness failed: {e}")))?;
            Ok(ERRNO_SUCCESS)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "environ_sizes_get",
        |mut c: Caller<'_, StoreData>, count: u32, size: u32| {
            memory::write(&mut c, count, &0u32.to_le_bytes())?;
            memory::write(&mut c, size, &0u32.to_le_bytes())?;
            Ok(ERRNO_SUCCESS)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "environ_get",
        |_: Caller<'_, StoreData>, _env: u32, _buf: u32| ERRNO_SUCCESS,
    )?;
    linker.func_wrap(
        MODULE,
        "clock_time_get",
        |mut c: Caller<'_, StoreData>, id: i32, _precision: i64, out: u32| {
            let nanos = match id {
                CLOCK_REALTIME => SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0),
                CLOCK_MONOTONIC => monotonic_origin().elapsed().as_nanos() as u64,
                _ => return Ok(ERRNO_INVAL),
            };
            memory::write(&mut c, out, &nanos.to_le_bytes())?;
            Ok(ERRNO_SUCCESS)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_write",
        |mut c: Caller<'_, StoreData>, fd: i32, iovs: u32, iovs_len: u32, nwritten: u32| {
            if fd != 1 && fd != 2 {
                return Ok(ERRNO_BADF);
            }
            if iovs_len > IOV_MAX {
                return Ok(ERRNO_INVAL);
            }
            let vecs = memory::read(&mut c, iovs, iovs_len * 8)?;
            let mut total: u32 = 0;
            for v in vecs.chunks_exact(8) {
                let ptr = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                let len = u32::from_le_bytes([v[4], v[5], v[6], v[7]]);
                memory::with(&mut c, ptr, len, |_| ())?; // the whole range is checked
                let room = CAPTURE_LIMIT.saturating_sub(c.data().captured_output.len());
                // Only what still fits is copied; the rest is counted as
                // written and dropped.
                let keep = (len as usize).min(room) as u32;
                if keep > 0 {
                    let bytes = memory::read(&mut c, ptr, keep)?;
                    c.data_mut().captured_output.extend_from_slice(&bytes);
                }
                total = total.saturating_add(len);
            }
            memory::write(&mut c, nwritten, &total.to_le_bytes())?;
            Ok(ERRNO_SUCCESS)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "poll_oneoff",
        |_: Caller<'_, StoreData>, _in: u32, _out: u32, _n: u32, _events: u32| ERRNO_NOTSUP,
    )?;
    linker.func_wrap(MODULE, "sched_yield", |_: Caller<'_, StoreData>| {
        ERRNO_SUCCESS
    })?;
    linker.func_wrap(
        MODULE,
        "proc_exit",
        |_: Caller<'_, StoreData>, code: i32| -> wasmtime::Result<()> {
            Err(wasmtime::Error::msg(format!(
                "the guest called proc_exit({code})"
            )))
        },
    )?;
    Ok(())
}

fn monotonic_origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}
