//! The host imports, wrapped in safe functions. The names and signatures are
//! defined in `airlock_guest_sdk::abi`; the sandbox links exactly these.

use airlock_guest_sdk::abi::{Completion, LogLevel, COMPLETION_SIZE, WAIT_READY};

#[link(wasm_import_module = "airlock")]
extern "C" {
    #[link_name = "script_read"]
    fn import_script_read(ptr: *mut u8, len: u32);
    #[link_name = "call_start"]
    fn import_call_start(
        name_ptr: *const u8,
        name_len: u32,
        args_ptr: *const u8,
        args_len: u32,
    ) -> u32;
    #[link_name = "timer_start"]
    fn import_timer_start(delay_ms: u32) -> u32;
    #[link_name = "cancel"]
    fn import_cancel(id: u32);
    #[link_name = "wait"]
    fn import_wait(out_ptr: *mut u8) -> u32;
    #[link_name = "payload_read"]
    fn import_payload_read(ptr: *mut u8, len: u32);
    #[link_name = "log"]
    fn import_log(level: u32, ptr: *const u8, len: u32);
    #[link_name = "finish"]
    fn import_finish(status: u32, ptr: *const u8, len: u32);
}

pub fn script(len: u32) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    // SAFETY: the buffer is exactly `len` writable bytes we own.
    unsafe { import_script_read(buf.as_mut_ptr(), len) };
    buf
}

pub fn call_start(name: &str, args_json: &[u8]) -> u32 {
    // SAFETY: both slices are live for the duration of the call; the host
    // copies them before returning.
    unsafe {
        import_call_start(
            name.as_ptr(),
            name.len() as u32,
            args_json.as_ptr(),
            args_json.len() as u32,
        )
    }
}

pub fn timer_start(delay_ms: u32) -> u32 {
    // SAFETY: no memory is shared.
    unsafe { import_timer_start(delay_ms) }
}

pub fn cancel(id: u32) {
    // SAFETY: no memory is shared.
    unsafe { import_cancel(id) }
}

/// Blocks until something completes; `None` when nothing is pending.
pub fn wait() -> Option<(Completion, Vec<u8>)> {
    let mut out = [0u8; COMPLETION_SIZE];
    // SAFETY: `out` is COMPLETION_SIZE writable bytes.
    let status = unsafe { import_wait(out.as_mut_ptr()) };
    if status != WAIT_READY {
        return None;
    }
    let completion = Completion::decode(&out);
    let mut payload = vec![0u8; completion.len as usize];
    if completion.len > 0 {
        // SAFETY: the buffer is exactly `len` writable bytes we own.
        unsafe { import_payload_read(payload.as_mut_ptr(), completion.len) };
    }
    Some((completion, payload))
}

pub fn log(level: LogLevel, line: &str) {
    // SAFETY: the slice is live for the call; the host copies it.
    unsafe { import_log(level as u32, line.as_ptr(), line.len() as u32) }
}

pub fn finish(status: u32, payload: &[u8]) {
    // SAFETY: the slice is live for the call; the host copies it.
    unsafe { import_finish(status, payload.as_ptr(), payload.len() as u32) }
}
