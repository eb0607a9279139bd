//! The guest's system interface: WASI preview 1 from `wasmtime-wasi`, with
//! a context that grants nothing.
//!
//! Rust's standard library in the guest imports a handful of WASI
//! functions (randomness, the clocks, the environment, writing to
//! stdout/stderr). They come from the wasmtime project's own
//! implementation, kept in step with the pinned wasmtime and fuzzed with
//! it, and every other preview-1 function is linked too, against a context
//! with no preopened directories, no environment, no arguments, no
//! inherited stdio and no network: a guest that calls `path_open` or
//! `sock_accept` gets an error, never a file or a socket.
//!
//! What the sandbox decides itself: the clocks and randomness are the
//! host's, one `random_get` fills at most [`RANDOM_MAX`] bytes (the library
//! allocates that much on the host before it checks the guest's buffer),
//! and stdout/stderr go to one bounded in-memory pipe, shown only when the
//! guest crashes.

use wasmtime::Linker;
use wasmtime_wasi::{p1::WasiP1Ctx, p2::pipe::MemoryOutputPipe, WasiCtxBuilder};

use crate::store::StoreData;

/// Guest stdout/stderr kept for diagnosing a crash (a panic message).
pub const CAPTURE_LIMIT: usize = 4096;

/// The pipe holds more than is shown, so a long panic message (written in
/// one piece, which the pipe takes whole or not at all) is still kept in
/// part.
const PIPE_CAPACITY: usize = 64 * 1024;

/// Most bytes one `random_get` fills. The standard library asks for a few
/// bytes at a time; a larger request traps.
pub const RANDOM_MAX: u64 = 64 * 1024;

/// One instance's WASI state, and the output it captured.
pub struct GuestSystem {
    pub ctx: WasiP1Ctx,
    output: MemoryOutputPipe,
}

impl GuestSystem {
    /// A context that grants nothing; stdout and stderr share one pipe.
    pub fn new() -> Self {
        let output = MemoryOutputPipe::new(PIPE_CAPACITY);
        let ctx = WasiCtxBuilder::new()
            .stdout(output.clone())
            .stderr(output.clone())
            .max_random_size(RANDOM_MAX)
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false)
            .build_p1();
        Self { ctx, output }
    }

    /// What the guest wrote, at most [`CAPTURE_LIMIT`] bytes of it.
    pub fn output(&self) -> Vec<u8> {
        let all = self.output.contents();
        all[..all.len().min(CAPTURE_LIMIT)].to_vec()
    }

    /// Whether the guest wrote anything since this context was made.
    pub fn wrote(&self) -> bool {
        !self.output.contents().is_empty()
    }
}

impl Default for GuestSystem {
    fn default() -> Self {
        Self::new()
    }
}

pub fn add_to_linker(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    wasmtime_wasi::p1::add_to_linker_async(linker, |data: &mut StoreData| &mut data.system.ctx)
}
