//! Bounds-checked access to guest memory. Every pointer the guest hands the
//! host goes through here; a range that does not fit is an ABI violation
//! that traps the instance, never a host read out of bounds.

use airlock_guest_sdk::abi::{EXPORT_MEMORY, TRAP_BAD_POINTER};
use wasmtime::{Caller, Extern, Memory};

use crate::store::StoreData;

fn handle(caller: &mut Caller<'_, StoreData>) -> wasmtime::Result<Memory> {
    if let Some(m) = caller.data().memory {
        return Ok(m);
    }
    match caller.get_export(EXPORT_MEMORY) {
        Some(Extern::Memory(m)) => {
            caller.data_mut().memory = Some(m);
            Ok(m)
        }
        _ => Err(violation("the guest exports no memory")),
    }
}

pub fn violation(what: &str) -> wasmtime::Error {
    wasmtime::Error::msg(format!("{TRAP_BAD_POINTER}: {what}"))
}

fn range(ptr: u32, len: u32) -> std::ops::Range<usize> {
    let start = ptr as usize;
    start..start + len as usize // u32 + u32 cannot overflow usize on 64-bit
}

/// Copies `[ptr, ptr+len)` out of guest memory.
pub fn read(caller: &mut Caller<'_, StoreData>, ptr: u32, len: u32) -> wasmtime::Result<Vec<u8>> {
    with(caller, ptr, len, <[u8]>::to_vec)
}

/// Runs `f` over `[ptr, ptr+len)` in place, without copying it out (for
/// bytes the host only parses or scans).
pub fn with<T>(
    caller: &mut Caller<'_, StoreData>,
    ptr: u32,
    len: u32,
    f: impl FnOnce(&[u8]) -> T,
) -> wasmtime::Result<T> {
    let mem = handle(caller)?;
    mem.data(&*caller)
        .get(range(ptr, len))
        .map(f)
        .ok_or_else(|| {
            violation(&format!(
                "read of {len} bytes at {ptr:#x} is outside guest memory"
            ))
        })
}

/// Runs `f` over `[ptr, ptr+len)` of guest memory, writable, in place.
pub fn with_mut<T>(
    caller: &mut Caller<'_, StoreData>,
    ptr: u32,
    len: u32,
    f: impl FnOnce(&mut [u8]) -> T,
) -> wasmtime::Result<T> {
    let mem = handle(caller)?;
    mem.data_mut(&mut *caller)
        .get_mut(range(ptr, len))
        .map(f)
        .ok_or_else(|| {
            violation(&format!(
                "write of {len} bytes at {ptr:#x} is outside guest memory"
            ))
        })
}

/// Copies `bytes` into guest memory at `ptr`.
pub fn write(caller: &mut Caller<'_, StoreData>, ptr: u32, bytes: &[u8]) -> wasmtime::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| violation("write larger than 4 GiB"))?;
    with_mut(caller, ptr, len, |dst| dst.copy_from_slice(bytes))
}
