//! Every import and export that crosses the wasm boundary, its encoding, and
//! who owns which memory.
//!
//! # Ownership
//!
//! The guest allocates every buffer in its own linear memory. The host never
//! calls into the guest's allocator: whenever the host has bytes for the
//! guest (the script, a tool result), the guest first learns the length,
//! allocates, and asks the host to copy into that buffer. Whenever the guest
//! has bytes for the host (tool arguments, console output, the final value),
//! it passes a `(ptr, len)` pair that the host bounds-checks against the
//! current memory size before reading. A pair that does not fit traps the
//! calling instance with [`TRAP_BAD_POINTER`]; it never reaches the host's
//! memory.
//!
//! # Encoding
//!
//! Strings are UTF-8; values are JSON (RFC 8259) text. Integers in
//! [`Completion`] are little-endian `u32`.
//!
//! # Flow of one execution
//!
//! 1. host calls export [`EXPORT_RUN`]`(script_len, result_bytes)`;
//! 2. guest allocates `script_len` bytes and calls [`IMPORT_SCRIPT_READ`];
//! 3. guest runs the script; every `tools.x(args)` becomes
//!    [`IMPORT_CALL_START`], which returns a call id at once;
//! 4. when the guest's job queue is empty and something is pending it calls
//!    [`IMPORT_WAIT`], which blocks (asynchronously, on the host) until one
//!    call or timer completes and reports its id, status and payload length;
//!    the guest then copies the payload with [`IMPORT_PAYLOAD_READ`];
//! 5. guest calls [`IMPORT_FINISH`] exactly once with the outcome, already
//!    cut to `result_bytes` (see [`crate::fit`]), and returns.
//!
//! # What the host reads
//!
//! Every length the guest passes is checked *before* the host reads or
//! parses anything: a tool name longer than [`MAX_TOOL_NAME_BYTES`] is
//! refused after reading only its first bytes, arguments are charged to
//! the execution's `args_bytes` before they are read, console lines to
//! `log_bytes` (with [`LOG_LINE_OVERHEAD`] each), and an outcome longer
//! than `result_bytes` + [`FINISH_SLACK`] is refused unread.

/// Module name of every host import.
pub const IMPORT_MODULE: &str = "airlock";

/// Bumped whenever any name, signature or layout in this file changes. The
/// host refuses a guest whose [`EXPORT_ABI_VERSION`] answers differently.
pub const ABI_VERSION: u32 = 3;

// ---------------------------------------------------------------- imports

/// `script_read(ptr: u32, len: u32)`: copy the script source (UTF-8) into
/// `[ptr, ptr+len)`. `len` must equal the length given to [`EXPORT_RUN`].
pub const IMPORT_SCRIPT_READ: &str = "script_read";

/// `call_start(name_ptr, name_len, args_ptr, args_len) -> u32`: start a tool
/// call and return its id (never 0) without waiting for it. The name is
/// UTF-8; the arguments are one JSON value. The host may refuse to start the
/// call (tool-call limit): it then traps the instance with
/// [`TRAP_LIMIT`], because a limit ends the whole execution.
pub const IMPORT_CALL_START: &str = "call_start";

/// `timer_start(delay_ms: u32) -> u32`: arm a one-shot timer (`setTimeout`)
/// and return its id. A timer never outlives the execution that armed it.
pub const IMPORT_TIMER_START: &str = "timer_start";

/// `cancel(id: u32)`: forget a pending timer (`clearTimeout`); the host
/// drops it at once. Unknown or finished ids, and ids of tool calls, are
/// ignored.
pub const IMPORT_CANCEL: &str = "cancel";

/// `wait(out_ptr: u32) -> u32`: block until one pending call or timer
/// completes and write a [`Completion`] ([`COMPLETION_SIZE`] bytes) at
/// `out_ptr`. Returns [`WAIT_READY`], or [`WAIT_IDLE`] when nothing is
/// pending (the guest would wait forever).
pub const IMPORT_WAIT: &str = "wait";

/// `payload_read(ptr: u32, len: u32)`: copy the payload of the completion
/// most recently returned by [`IMPORT_WAIT`]. `len` must equal
/// [`Completion::len`].
pub const IMPORT_PAYLOAD_READ: &str = "payload_read";

/// `log(level: u32, ptr: u32, len: u32)`: one console line (UTF-8) at a
/// [`LogLevel`].
pub const IMPORT_LOG: &str = "log";

/// `finish(status: u32, ptr: u32, len: u32)`: the outcome of the execution,
/// called once. With [`FINISH_OK`] the bytes are the JSON result value; with
/// [`FINISH_TRUNCATED`] a JSON object `{"value", "original_bytes"}` whose
/// value the guest cut to `result_bytes`; with [`FINISH_ERROR`] a JSON
/// [guest error](#guest-errors) object.
pub const IMPORT_FINISH: &str = "finish";

// ---------------------------------------------------------------- exports

/// `airlock_abi_version() -> u32`: answers [`ABI_VERSION`].
pub const EXPORT_ABI_VERSION: &str = "airlock_abi_version";

/// `airlock_run(script_len: u32, result_bytes: u32, flags: u32)`: run one
/// script in the current realm; its result must be cut to `result_bytes`
/// (as JSON text). `flags` is a set of `RUN_*` bits.
pub const EXPORT_RUN: &str = "airlock_run";

/// A flag of [`EXPORT_RUN`]: the script is JavaScript as written, with
/// nothing rewritten (no Markdown fence, `export default` or TypeScript
/// types taken away). For reviewed scripts (runbooks): what an approver
/// read is what runs, or it does not run.
pub const RUN_AS_WRITTEN: u32 = 1;

/// A flag of [`EXPORT_RUN`]: parse the script and finish, running none of
/// it (the result is `null`, or the syntax error).
pub const RUN_CHECK_ONLY: u32 = 2;

/// `airlock_reset()`: drop the current realm and build a brand-new one, so
/// the next [`EXPORT_RUN`] starts from a state no earlier script touched.
/// Used by the `reuse` mode between executions.
pub const EXPORT_RESET: &str = "airlock_reset";

/// The pre-initialisation entry point (wizer's default name). Builds the
/// first realm so that a snapshot of memory already holds it.
pub const EXPORT_INITIALIZE: &str = "wizer-initialize";

/// Name of the exported linear memory.
pub const EXPORT_MEMORY: &str = "memory";

// ---------------------------------------------------------------- values

/// [`IMPORT_WAIT`] wrote a completion.
pub const WAIT_READY: u32 = 0;
/// [`IMPORT_WAIT`] found nothing pending.
pub const WAIT_IDLE: u32 = 1;

/// The call returned a JSON result.
pub const STATUS_OK: u32 = 0;
/// The call failed; the payload is a JSON tool error
/// `{"tool","code","message",...}`.
pub const STATUS_TOOL_ERROR: u32 = 1;
/// A timer fired; the payload is empty.
pub const STATUS_TIMER: u32 = 2;

/// [`IMPORT_FINISH`] status: the payload is the JSON result.
pub const FINISH_OK: u32 = 0;
/// [`IMPORT_FINISH`] status: the payload is a JSON guest error.
pub const FINISH_ERROR: u32 = 1;
/// [`IMPORT_FINISH`] status: the payload is `{"value": V, "original_bytes":
/// N}`, V being the result cut to `result_bytes` from N bytes.
pub const FINISH_TRUNCATED: u32 = 2;

/// Bytes an outcome may take beyond `result_bytes`: room for the
/// truncation wrapper or an error object (whose texts the guest caps at
/// [`crate::fit::MESSAGE_CHARS`] characters). A longer outcome is refused
/// before the host reads it.
pub const FINISH_SLACK: u32 = 64 * 1024;

/// Longest tool name the host reads. Every real name is far shorter; a
/// longer one fails the call (`not_found`) after the host read only its
/// first [`NAME_SHOWN_BYTES`] bytes to name it in the trace.
pub const MAX_TOOL_NAME_BYTES: u32 = 256;

/// How much of an over-long tool name the host reads to show it.
pub const NAME_SHOWN_BYTES: u32 = 64;

/// What one console line costs against `log_bytes` on top of its text: the
/// host keeps an entry per line, so ten million empty lines are not free.
pub const LOG_LINE_OVERHEAD: u64 = 64;

/// What each JSON value (more exactly, each `{`, `[`, `:` and `,`, plus
/// one) in a call's arguments costs against `args_bytes` on top of its
/// text: the host parses arguments into a tree whose nodes take about this
/// much each, so `[0,0,0,…]` costs what the host holds, not two bytes an
/// element.
pub const ARGS_VALUE_OVERHEAD: u64 = 64;

/// Size in bytes of an encoded [`Completion`].
pub const COMPLETION_SIZE: usize = 12;

/// Console levels, in the order of `console.log/info/warn/error/debug`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum LogLevel {
    Log = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
    Debug = 4,
}

impl LogLevel {
    /// Decodes a level; `None` for a value the guest must never send.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Log),
            1 => Some(Self::Info),
            2 => Some(Self::Warn),
            3 => Some(Self::Error),
            4 => Some(Self::Debug),
            _ => None,
        }
    }

    /// The lower-case name, as in `console.<name>`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Log => "log",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
            Self::Debug => "debug",
        }
    }
}

/// What [`IMPORT_WAIT`] reports: which pending id finished, how, and how long
/// its payload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub id: u32,
    pub status: u32,
    pub len: u32,
}

impl Completion {
    /// Little-endian `id, status, len`.
    pub fn encode(&self) -> [u8; COMPLETION_SIZE] {
        let mut out = [0u8; COMPLETION_SIZE];
        out[0..4].copy_from_slice(&self.id.to_le_bytes());
        out[4..8].copy_from_slice(&self.status.to_le_bytes());
        out[8..12].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8; COMPLETION_SIZE]) -> Self {
        let word =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        Self {
            id: word(0),
            status: word(4),
            len: word(8),
        }
    }
}

// ---------------------------------------------------------------- traps

/// Trap message prefix when a guest pointer/length pair falls outside its
/// memory, or the guest breaks the call protocol (wrong length, second
/// `finish`, unknown level). Such an instance is never reused.
pub const TRAP_BAD_POINTER: &str = "airlock ABI violation";

/// Trap message prefix when the host ends an execution because a limit was
/// hit; the host reports the limit itself, not this text.
pub const TRAP_LIMIT: &str = "airlock limit reached";

// ---------------------------------------------------------------- guest errors
//
// The JSON object passed to IMPORT_FINISH with FINISH_ERROR has a "kind" and
// the fields of that kind:
//
//   {"kind":"SyntaxError","message":..,"line":..,"column":..}
//   {"kind":"RuntimeError","message":..,"stack":..}
//   {"kind":"ToolError","call":..,"tool":..,"code":..,"message":..}
//
// A ToolError names the id of the call whose failure escaped; the host
// reports the failure it recorded for that call (never the guest's texts,
// so a script cannot forge `approval_required` or `policy_denied`). Any
// other thrown value is a RuntimeError.
//   {"kind":"Deadlock","message":..}
//   {"kind":"RuntimeLimit","limit":"recursion_depth"|"js_stack_size","value":..}

/// `kind` of a guest error object.
pub const KIND_SYNTAX: &str = "SyntaxError";
pub const KIND_RUNTIME: &str = "RuntimeError";
pub const KIND_TOOL: &str = "ToolError";
pub const KIND_DEADLOCK: &str = "Deadlock";
/// One of the JS engine's own fixed limits (uncatchable in JS).
pub const KIND_RUNTIME_LIMIT: &str = "RuntimeLimit";

/// The JS engine's fixed limits, as reported with [`KIND_RUNTIME_LIMIT`].
pub const RECURSION_DEPTH: u32 = 512;
pub const JS_STACK_SIZE: u32 = 10 * 1024;
