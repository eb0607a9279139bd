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
//! Anything else (a file, a terminal) keeps tokio's blocking reads and
//! writes. So does stdout when stderr is the same pipe: non-blocking mode
//! belongs to the pipe's open file, which stderr would then share, and a
//! diagnostic written to a full pipe must wait, not fail.

use tokio::net::unix::pipe;
use tokio_util::either::Either;

/// What the MCP session reads.
pub type Input = Either<pipe::Receiver, tokio::io::Stdin>;
/// What the MCP session writes.
pub type Output = Either<pipe::Sender, tokio::io::Stdout>;

/// Stdin and stdout for the MCP transport, as pipes where they are pipes.
pub fn transport() -> (Input, Output) {
    (input(), output())
}

fn input() -> Input {
    match dup(&std::io::stdin()).and_then(pipe::Receiver::from_file) {
        Ok(pipe) => Either::Left(pipe),
        Err(_) => Either::Right(tokio::io::stdin()),
    }
}

fn output() -> Output {
    if stderr_shares_stdout() {
        return Either::Right(tokio::io::stdout());
    }
    match dup(&std::io::stdout()).and_then(pipe::Sender::from_file) {
        Ok(pipe) => Either::Left(pipe),
        Err(_) => Either::Right(tokio::io::stdout()),
    }
}

/// A second descriptor for the same open file, as a `File` tokio can own
/// (the standard handles stay open for anything else that uses them).
fn dup(fd: &impl std::os::fd::AsFd) -> std::io::Result<std::fs::File> {
    Ok(std::fs::File::from(fd.as_fd().try_clone_to_owned()?))
}

fn stderr_shares_stdout() -> bool {
    use std::os::unix::fs::MetadataExt;
    let meta = |fd: &dyn std::os::fd::AsFd| dup(&fd.as_fd()).and_then(|f| f.metadata());
    match (meta(&std::io::stdout()), meta(&std::io::stderr())) {
        (Ok(out), Ok(err)) => out.dev() == err.dev() && out.ino() == err.ino(),
        // Unknown: assume shared, and keep the blocking writes.
        _ => true,
    }
}
