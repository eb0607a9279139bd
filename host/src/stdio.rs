//! The bytes of `airlock serve` on stdio: when stdin and stdout are pipes
//! (as every MCP client starts a server), they are read and written on
//! the runtime's own threads through epoll, not through tokio's blocking
//! pool.
//!
//! Tokio's `stdin()`/`stdout()` hand every read and write to a thread of
//! the blocking pool and wake the runtime when it is done. On a small
//! machine those hand-offs are most of an MCP round trip: measured on two
//! cores, 10 context switches and 0.10 ms of CPU per ping (see
//! docs/PERFORMANCE.md). A pipe in non-blocking mode needs none of them.
//!
//! The pipes are opened anew through /proc/self/fd (Linux), so the
//! non-blocking mode belongs to Airlock's own open file and never to the
//! one it shares with stderr, a parent shell or the next program on the
//! pipe. Anything else (a file, a terminal, a socket, no /proc) keeps
//! tokio's blocking reads and writes, on descriptors left as they were.

use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

use tokio::net::unix::pipe;
use tokio_util::either::Either;

/// What the MCP session reads.
pub type Input = Either<pipe::Receiver, tokio::io::Stdin>;
/// What the MCP session writes.
pub type Output = Either<pipe::Sender, tokio::io::Stdout>;

/// Stdin and stdout for the MCP transport, as pipes where they are pipes.
pub fn transport() -> (Input, Output) {
    let input = match reopen(0, false) {
        Some(file) => pipe::Receiver::from_file(file).ok(),
        None => None,
    };
    let output = match reopen(1, true) {
        Some(file) => pipe::Sender::from_file(file).ok(),
        None => None,
    };
    (
        input.map_or_else(|| Either::Right(tokio::io::stdin()), Either::Left),
        output.map_or_else(|| Either::Right(tokio::io::stdout()), Either::Left),
    )
}

/// Descriptor `fd` opened again as a new open file, non-blocking, when it
/// is a pipe. Opening the write end fails (ENXIO) when nobody reads it;
/// the caller then keeps the standard handle.
fn reopen(fd: u32, write: bool) -> Option<std::fs::File> {
    let path = format!("/proc/self/fd/{fd}");
    if !std::fs::metadata(&path).ok()?.file_type().is_fifo() {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .ok()
}
