//! What crossed the sandbox boundary into one execution, in the order the
//! guest saw it: the answers its tool calls got, the timers that fired,
//! the clock readings and the random bytes it drew.
//!
//! The guest is deterministic given those inputs: a fresh instance of the
//! same snapshot, running the same script, fed the same journal, asks for
//! exactly the same calls in the same order. That is what lets an
//! execution stop (to wait for a person, or because its process died) and
//! go on later anywhere: [`crate::Sandbox::execute_journaled`] replays the
//! journal without sending anything, then goes on live, appending to it.
//! Where the script asks for something other than what the journal holds,
//! the replay stops, sends nothing, and says where (`ReplayDiverged`).
//!
//! A journal holds only what the script saw or made: call names and a
//! digest of their arguments (not the arguments), the results as the host
//! handed them over (already redacted by whoever implements the tool
//! host), clock readings and random bytes. It is bounded by the
//! `journal_bytes` limit, counted as [`Entry::cost`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One execution's journal. Serializable, so a host can keep it in a
/// store between a pause and a resume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// SHA-256 (hex) of the script the entries belong to; empty until the
    /// journal first records.
    #[serde(default)]
    pub script: String,
    #[serde(default)]
    pub entries: Vec<Entry>,
}

/// One thing that crossed the boundary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case")]
pub enum Entry {
    /// The script started call `id` (ids are the guest's, in order): the
    /// tool's name as the trace shows it and a digest of the arguments,
    /// enough to tell a replay that asks for something else.
    Call { id: u32, tool: String, args: String },
    /// The script armed timer `id` for `delay_ms`, at `at_ms` (Unix time,
    /// milliseconds): a timer still pending when a replay goes live fires
    /// when it was due, not a full delay later.
    Timer { id: u32, delay_ms: u32, at_ms: u64 },
    /// What `wait` handed the guest: the call or timer `id` ended with
    /// `status` (the ABI's) and `payload` (JSON text; empty for a timer).
    Done {
        id: u32,
        status: u32,
        payload: String,
    },
    /// A clock reading: wall (Unix time) or monotonic, in nanoseconds.
    Clock { wall: bool, ns: u64 },
    /// Random bytes (hex) drawn one after another with no other entry
    /// between them.
    Random { hex: String },
}

/// What every entry costs besides its variable parts: about what its
/// JSON form takes.
pub const ENTRY_OVERHEAD: u64 = 48;

impl Entry {
    /// What the entry counts against `journal_bytes`: its variable parts
    /// plus [`ENTRY_OVERHEAD`], about its serialized size.
    pub fn cost(&self) -> u64 {
        ENTRY_OVERHEAD
            + match self {
                Self::Call { tool, args, .. } => (tool.len() + args.len()) as u64,
                Self::Done { payload, .. } => payload.len() as u64,
                Self::Random { hex } => hex.len() as u64,
                Self::Timer { .. } | Self::Clock { .. } => 0,
            }
    }

    /// A short description for divergence messages: what it is, never
    /// what a payload holds.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Call { id, tool, .. } => format!("call #{id} to {tool}"),
            Self::Timer { id, delay_ms, .. } => format!("timer #{id} of {delay_ms} ms"),
            Self::Done { id, .. } => format!("the end of #{id}"),
            Self::Clock { wall: true, .. } => "a wall-clock reading".into(),
            Self::Clock { wall: false, .. } => "a monotonic-clock reading".into(),
            Self::Random { .. } => "random bytes".into(),
        }
    }
}

impl Journal {
    /// An empty journal: an execution run with it records from the start.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the entries cost against `journal_bytes`.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(Entry::cost).sum()
    }

    /// Calls the journal shows started, and how many of them it shows
    /// ended.
    pub fn calls(&self) -> (usize, usize) {
        let started: std::collections::HashSet<u32> = self
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Call { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        let ended = self
            .entries
            .iter()
            .filter(|e| matches!(e, Entry::Done { id, .. } if started.contains(id)))
            .count();
        (started.len(), ended)
    }
}

/// The digest a [`Journal`] names its script by.
pub fn script_digest(script: &str) -> String {
    hex::encode(Sha256::digest(script.as_bytes()))
}

/// The digest an [`Entry::Call`] keeps of a call's name and arguments: 16
/// bytes of SHA-256, enough to tell two calls apart, nothing to read an
/// argument back from.
pub(crate) fn call_digest(name: &str, args: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(args).expect("a JSON value always serializes"));
    hex::encode(&h.finalize()[..16])
}
