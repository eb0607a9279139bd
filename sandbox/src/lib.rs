//! The Airlock sandbox: runs an agent's JavaScript in a wasmtime instance
//! whose only capability is calling tools through a [`ToolHost`].
//!
//! ```no_run
//! # async fn demo(host: &dyn airlock_sandbox::ToolHost) -> Result<(), airlock_sandbox::SandboxError> {
//! use airlock_sandbox::{Limits, Sandbox, SandboxConfig};
//! let sandbox = Sandbox::new(SandboxConfig::default()).await?;
//! let outcome = sandbox
//!     .execute("const n = await tools.node_list({}); n.length", &Limits::default(), host)
//!     .await;
//! println!("{}", serde_json::to_string_pretty(&outcome).unwrap());
//! # Ok(()) }
//! ```
//!
//! The crate knows nothing of MCP, Proxmox or HTTP: tools are names and JSON
//! to it. See `README.md` for what a script can do and the limits.

// `ExecError` carries the JSON details of a tool failure and is produced at
// most once per execution, never in a loop: its size does not matter.
#![allow(clippy::result_large_err)]

mod admission;
mod cache;
mod dispatch;
mod engine;
mod execution;
mod imports;
mod journal;
mod limits;
mod memory;
mod outcome;
mod replay;
mod sandbox;
mod store;
mod tool_host;
mod turns;
mod wasi;

use std::path::Path;

/// What each console line costs against `log_bytes` besides its text, and
/// each JSON token of a call's arguments against `args_bytes`.
pub use airlock_guest_sdk::abi::{ARGS_VALUE_OVERHEAD, LOG_LINE_OVERHEAD};
pub use cache::default_dir as default_cache_dir;
pub use journal::{script_digest, Entry, Journal, ENTRY_OVERHEAD};
pub use limits::{
    parse_bytes, Capacity, Limit, Limits, LimitsError, MAX_EXECUTIONS_IN_FLIGHT,
    MAX_HANDOVER_BYTES, MAX_JOURNAL_BYTES, MAX_MEMORY_BYTES,
};
pub use outcome::{
    CallRecord, ExecError, JournalStats, LogEntry, LogLevel, Outcome, Stats, Truncation, Waiting,
};
pub use sandbox::{Mode, Sandbox, SandboxConfig};
pub use tool_host::{codes, CallNote, JournalTap, ToolCall, ToolFailure, ToolHost};

/// The guest module embedded in this build, for tests that want to poke at
/// the ABI directly.
pub fn guest_wasm() -> &'static [u8] {
    engine::GUEST_WASM
}

/// Why a sandbox could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Limits(#[from] LimitsError),
    #[error("wasmtime: {0}")]
    Engine(String),
    #[error("the guest does not match this host's ABI: {0}")]
    Abi(String),
    /// `reuse` mode's background thread could not be started.
    #[error("cannot start the thread that resets reused instances: {0}")]
    ResetThread(String),
    #[error("no directory for the compiled-module cache: set AIRLOCK_CACHE_DIR, XDG_CACHE_HOME or HOME (a shared temporary directory is never used)")]
    NoCacheDir,
    #[error("compiled-module cache at {path}: {source}")]
    Cache {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    fn engine(e: impl std::fmt::Display) -> Self {
        Self::Engine(format!("{e:#}"))
    }

    fn cache(path: &Path, source: std::io::Error) -> Self {
        Self::Cache {
            path: path.display().to_string(),
            source,
        }
    }
}
