//! Each execution's full call trace and stats, kept a while for the
//! person who ran it (`airlock://executions/{id}`), so `execute` can
//! answer with the value and a one-line call summary: a script that fans
//! out 500 calls costs the agent's context its result, not 40 KB of
//! trace it rarely reads.
//!
//! Bounded three ways, so a busy server holds at most [`MAX_BYTES`]: the
//! newest [`MAX_KEPT`] executions, for [`KEPT_FOR`], oldest dropped first.
//! A trace is read only by the identity that ran it; another identity's
//! is answered exactly as one that was never kept.

use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, Instant},
};

use airlock_sandbox::{CallRecord, Outcome, Stats};
use serde_json::json;

/// Executions kept.
pub const MAX_KEPT: usize = 64;
/// Bytes of trace kept in all, as [`size`] counts them (a trace larger
/// than this is not kept).
pub const MAX_BYTES: usize = 8 << 20;
/// How long an execution's trace can be read.
pub const KEPT_FOR: Duration = Duration::from_secs(KEPT_MINUTES * 60);
const KEPT_MINUTES: u64 = 10;

struct Kept {
    id: String,
    identity: String,
    at: Instant,
    trace: Vec<CallRecord>,
    stats: Stats,
    bytes: usize,
}

#[derive(Default)]
pub struct Traces {
    kept: Mutex<VecDeque<Kept>>,
}

/// Why a trace cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    #[error(
        "no execution `{0}` kept for this identity: the last {MAX_KEPT} executions' traces are kept for {KEPT_MINUTES} minutes, on the server that ran them; run the script again with \"trace\": true to get one in the result"
    )]
    NotKept(String),
}

impl Traces {
    /// Keeps `outcome`'s trace and stats under `id` for `identity`: taken,
    /// not copied, and written out only when read.
    pub fn keep(&self, id: &str, identity: &str, outcome: Outcome) {
        let bytes = size(&outcome.trace);
        if bytes > MAX_BYTES {
            return;
        }
        let now = Instant::now();
        let mut kept = self.kept.lock().expect("traces lock");
        kept.retain(|k| now.duration_since(k.at) < KEPT_FOR);
        let mut total: usize = kept.iter().map(|k| k.bytes).sum::<usize>() + bytes;
        while kept.len() >= MAX_KEPT || total > MAX_BYTES {
            match kept.pop_front() {
                Some(old) => total -= old.bytes,
                None => break,
            }
        }
        kept.push_back(Kept {
            id: id.to_string(),
            identity: identity.to_string(),
            at: now,
            trace: outcome.trace,
            stats: outcome.stats,
            bytes,
        });
    }

    /// The trace document of execution `id`, if `identity` ran it and it
    /// is still kept.
    pub fn read(&self, id: &str, identity: &str) -> Result<String, TraceError> {
        let kept = self.kept.lock().expect("traces lock");
        kept.iter()
            .rev()
            .find(|k| k.id == id && k.identity == identity && k.at.elapsed() < KEPT_FOR)
            .map(|k| {
                serde_json::to_string_pretty(&document(id, &k.trace, &k.stats))
                    .expect("a trace serializes")
            })
            .ok_or_else(|| TraceError::NotKept(id.to_string()))
    }
}

/// What a kept trace holds in memory, about: each record's fixed part and
/// its tool name.
fn size(trace: &[CallRecord]) -> usize {
    trace
        .iter()
        .map(|c| std::mem::size_of::<CallRecord>() + c.tool.len() + c.status.len())
        .sum()
}

/// What `"trace": true` adds to a result, and what the resource answers.
pub fn document(id: &str, trace: &[CallRecord], stats: &Stats) -> serde_json::Value {
    json!({
        "execution": id,
        "trace": trace,
        "stats": stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(calls: usize) -> Outcome {
        Outcome {
            result: Ok(json!(1)),
            truncated: None,
            logs: vec![],
            logs_truncated: None,
            trace: (0..calls)
                .map(|i| CallRecord {
                    tool: "vm_list".into(),
                    start_us: i as u64,
                    duration_us: Some(1),
                    status: "ok".into(),
                })
                .collect(),
            stats: Stats::default(),
        }
    }

    #[test]
    fn only_the_identity_that_ran_it_reads_it() {
        let t = Traces::default();
        t.keep("e1", "alice", outcome(2));
        assert!(t.read("e1", "alice").unwrap().contains("vm_list"));
        let theirs = t.read("e1", "bob").unwrap_err();
        let none = t.read("e9", "bob").unwrap_err();
        // Another's trace reads exactly as one never kept.
        assert_eq!(theirs.to_string().replace("e1", "e9"), none.to_string());
    }

    #[test]
    fn the_oldest_go_first_past_the_count() {
        let t = Traces::default();
        for i in 0..MAX_KEPT + 3 {
            t.keep(&format!("e{i}"), "alice", outcome(1));
        }
        for i in 0..3 {
            assert!(t.read(&format!("e{i}"), "alice").is_err());
        }
        assert!(t.read("e3", "alice").is_ok());
        assert!(t.read(&format!("e{}", MAX_KEPT + 2), "alice").is_ok());
        assert_eq!(t.kept.lock().unwrap().len(), MAX_KEPT);
    }

    #[test]
    fn the_bytes_kept_stay_under_the_cap() {
        let t = Traces::default();
        // About 1 MB each: the cap holds 8 of them, not 64.
        let each = size(&outcome(1).trace);
        for i in 0..12 {
            t.keep(&format!("e{i}"), "alice", outcome((1 << 20) / each));
        }
        let kept = t.kept.lock().unwrap();
        let bytes: usize = kept.iter().map(|k| k.bytes).sum();
        assert!(bytes <= MAX_BYTES, "{bytes}");
        assert!(kept.len() < 12 && kept.back().unwrap().id == "e11");
    }
}
