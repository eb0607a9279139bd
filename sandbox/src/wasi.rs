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
//! one call copies at most [`HOSTCALL_BYTES`] of guest memory, stdout and
//! stderr go to one bounded in-memory pipe, shown only when the guest
//! crashes, and the library's own log lines (one per `sock_accept`, at the
//! guest's pace) stay off unless named (`host/src/log_output.rs`).

use wasmtime_wasi::{p1::WasiP1Ctx, p2::pipe::MemoryOutputPipe, WasiCtxBuilder};

/// Guest stdout/stderr kept for diagnosing a crash (a panic message).
pub const CAPTURE_LIMIT: usize = 4096;

/// What the pipe holds; writes past it fail (the guest's panic hook
/// ignores that). Only the first [`CAPTURE_LIMIT`] bytes are shown.
const PIPE_CAPACITY: usize = 64 * 1024;

/// Most bytes one `random_get` fills. The standard library asks for a few
/// bytes at a time; a larger request traps.
pub const RANDOM_MAX: u64 = 64 * 1024;

/// Most bytes of guest memory one WASI call may make the host copy or walk
/// (a path, an iovec list, poll subscriptions): wasmtime's "hostcall fuel",
/// 128 MiB by default, which a guest could spend on every call. Past it a
/// call fails with `ENOMEM`.
pub const HOSTCALL_BYTES: usize = 64 * 1024;

/// One instance's WASI state, and the output it captured.
pub struct GuestSystem {
    pub ctx: WasiP1Ctx,
    output: MemoryOutputPipe,
}

impl GuestSystem {
    /// A context that grants nothing; stdout and stderr share one pipe.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// The same, with the clocks and randomness read through a journaled
    /// execution's recorder: replayed from its journal, then recorded.
    pub(crate) fn journaled(recorder: crate::replay::Shared) -> Self {
        Self::build(Some(recorder))
    }

    fn build(recorder: Option<crate::replay::Shared>) -> Self {
        let output = MemoryOutputPipe::new(PIPE_CAPACITY);
        let mut builder = WasiCtxBuilder::new();
        if let Some(r) = recorder {
            use crate::replay::{Monotonic, Random, Wall};
            builder
                .wall_clock(Wall(r.clone()))
                .monotonic_clock(Monotonic(r.clone()))
                .secure_random(Random(r));
        }
        let ctx = builder
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
}

impl Default for GuestSystem {
    fn default() -> Self {
        Self::new()
    }
}
