//! The process that cleans up when a test process ends without dropping
//! its server (a panic in a `static`, a kill, Ctrl-C, a harness timeout):
//! an `sh` script holding the read end of a pipe whose write end only the
//! test process has. The kernel closes that end however the test process
//! ends; the script sees end-of-file and stops the server and removes its
//! directory. Each server brings its own script; this is the part they
//! share.

use std::{
    io::Write,
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
};

pub(crate) struct Watchdog {
    child: Child,
    /// Whose watchdog, for messages ("nginx", "PostgreSQL", ...).
    what: &'static str,
}

impl Watchdog {
    /// Starts `script` (the `sh -c` command, its arguments given) with its
    /// stdin a pipe from us, no output, and in a process group of its own,
    /// so a Ctrl-C meant for the tests does not end it before it is done.
    pub(crate) fn spawn(mut script: Command, what: &'static str) -> Result<Self, String> {
        let child = script
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{what}: cannot start the watchdog (sh): {e}"))?;
        Ok(Self { child, what })
    }

    /// Hands the script a line (a pid to stop if the test process dies, or
    /// `stopped` once there is none).
    pub(crate) fn tell(&mut self, line: &str) -> Result<(), String> {
        let what = self.what;
        let stdin = self
            .child
            .stdin
            .as_mut()
            .ok_or_else(|| format!("{what}: the watchdog is gone"))?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| format!("{what}: cannot talk to the watchdog: {e}"))
    }

    /// Closes the pipe and waits for the script to finish its cleanup.
    pub(crate) fn release(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}
