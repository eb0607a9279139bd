//! Each execution's full call trace and stats, kept a while for the
//! person who ran it (`airlock://executions/{id}`), so `execute` can
//! answer with the value and a one-line call summary: a script that fans
//! out 500 calls costs the agent's context its result, not 40 KB of
//! trace it rarely reads.
//!
//! Bounded so a busy server holds about [`MAX_BYTES`] at most: the newest
//! [`MAX_KEPT`] executions that made calls, [`PER_IDENTITY`] of them per
//! identity (so one identity's runs cannot push out another's), for
//! [`KEPT_FOR`], oldest dropped first. A trace is read only by the
//! identity that ran it; another identity's is answered exactly as one
//! that was never kept.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use airlock_catalog::visible;
use airlock_sandbox::{CallRecord, Outcome, Stats};
use serde_json::json;

/// Executions kept in all.
pub const MAX_KEPT: usize = 64;
/// Executions kept per identity.
pub const PER_IDENTITY: usize = 16;
/// Bytes kept in all, as [`size`] counts them (a trace larger than this
/// is not kept).
pub const MAX_BYTES: usize = 8 << 20;
const KEPT_MINUTES: u64 = 10;
/// How long an execution's trace can be read.
pub const KEPT_FOR: Duration = Duration::from_secs(KEPT_MINUTES * 60);

/// How much of an id the client sent an error quotes.
const QUOTED_ID_CHARS: usize = 128;

/// What an allocation costs beyond what it holds, about (malloc's header
/// and rounding).
const PER_ALLOCATION: usize = 32;

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
    kept: Mutex<VecDeque<Arc<Kept>>>,
}

/// Why a trace cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    #[error(
        "no execution `{0}` kept for this identity: the traces of executions that made tool calls are kept for {KEPT_MINUTES} minutes on the server that ran them, the last {PER_IDENTITY} per identity; pass \"trace\": true to execute to get a run's trace in its result"
    )]
    NotKept(String),
}

impl Traces {
    /// Whether [`Traces::keep`] would keep `outcome`'s trace: one with
    /// calls, not larger than [`MAX_BYTES`].
    pub fn would_keep(outcome: &Outcome) -> bool {
        !outcome.trace.is_empty() && size(&outcome.trace) <= MAX_BYTES
    }

    /// Keeps `outcome`'s trace and stats under `id` for `identity`: taken,
    /// not copied, and written out only when read.
    pub fn keep(&self, id: &str, identity: &str, outcome: Outcome) {
        if !Self::would_keep(&outcome) {
            return;
        }
        let mut trace = outcome.trace;
        trace.shrink_to_fit();
        let bytes = size(&trace);
        let now = Instant::now();
        // Dropped after the lock is released.
        let mut gone: Vec<Arc<Kept>> = Vec::new();
        let mut kept = self.lock();
        let (stale, fresh): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut *kept)
            .into_iter()
            .partition(|k| now.duration_since(k.at) >= KEPT_FOR);
        gone.extend(stale);
        *kept = fresh;
        let mine = kept.iter().filter(|k| k.identity == identity).count();
        if mine >= PER_IDENTITY {
            if let Some(i) = kept.iter().position(|k| k.identity == identity) {
                gone.extend(kept.remove(i));
            }
        }
        let mut total: usize = kept.iter().map(|k| k.bytes).sum::<usize>() + bytes;
        while kept.len() >= MAX_KEPT || total > MAX_BYTES {
            match kept.pop_front() {
                Some(old) => {
                    total -= old.bytes;
                    gone.push(old);
                }
                None => break,
            }
        }
        kept.push_back(Arc::new(Kept {
            id: id.to_string(),
            identity: identity.to_string(),
            at: now,
            trace,
            stats: outcome.stats,
            bytes,
        }));
        drop(kept);
        drop(gone);
    }

    /// The trace document of execution `id`, if `identity` ran it and it
    /// is still kept; written out after the lock is released.
    pub fn read(&self, id: &str, identity: &str) -> Result<String, TraceError> {
        let found = self
            .lock()
            .iter()
            .rev()
            .find(|k| k.id == id && k.identity == identity && k.at.elapsed() < KEPT_FOR)
            .cloned();
        let k = found.ok_or_else(|| TraceError::NotKept(visible::quote(id, QUOTED_ID_CHARS)))?;
        Ok(
            serde_json::to_string_pretty(&document(&k.id, &k.trace, &k.stats))
                .expect("a trace serializes"),
        )
    }

    /// The store: a panic elsewhere while holding it leaves it whole.
    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Kept>>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a kept trace holds in memory, about: the records' vector as
/// allocated, and each record's two strings with their allocations.
fn size(trace: &[CallRecord]) -> usize {
    std::mem::size_of_val(trace)
        + trace
            .iter()
            .map(|c| c.tool.capacity() + c.status.capacity() + 2 * PER_ALLOCATION)
            .sum::<usize>()
}

/// What the resource answers.
fn document(id: &str, trace: &[CallRecord], stats: &Stats) -> serde_json::Value {
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
                    replayed: false,
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
        // Five identities' runs, more than the store holds.
        for i in 0..MAX_KEPT + 16 {
            t.keep(&format!("e{i}"), &format!("p{}", i % 5), outcome(1));
        }
        assert_eq!(t.lock().len(), MAX_KEPT);
        assert!(t.read("e0", "p0").is_err());
        let last = MAX_KEPT + 15;
        assert!(t
            .read(&format!("e{last}"), &format!("p{}", last % 5))
            .is_ok());
    }

    #[test]
    fn one_identity_cannot_push_out_another() {
        let t = Traces::default();
        t.keep("mine", "alice", outcome(1));
        for i in 0..10 * MAX_KEPT {
            t.keep(&format!("e{i}"), "mallory", outcome(1));
        }
        assert!(t.read("mine", "alice").is_ok());
        let theirs = t.lock().iter().filter(|k| k.identity == "mallory").count();
        assert_eq!(theirs, PER_IDENTITY);
    }

    #[test]
    fn an_unknown_id_is_quoted_cut_and_visible() {
        let t = Traces::default();
        let id = format!("\u{202e}{}", "x".repeat(10_000));
        let e = t.read(&id, "alice").unwrap_err().to_string();
        assert!(!e.contains('\u{202e}') && e.len() < 600, "{e}");
    }

    #[test]
    fn a_run_without_calls_is_not_kept() {
        let t = Traces::default();
        t.keep("e1", "alice", outcome(0));
        assert!(t.lock().is_empty());
    }

    #[test]
    fn the_bytes_kept_stay_under_the_cap() {
        let t = Traces::default();
        // About 1 MB each: the cap holds 8 of them, not 64.
        let each = size(&outcome(1).trace);
        for i in 0..12 {
            t.keep(
                &format!("e{i}"),
                &format!("p{i}"),
                outcome((1 << 20) / each),
            );
        }
        let kept = t.lock();
        let bytes: usize = kept.iter().map(|k| k.bytes).sum();
        assert!(bytes <= MAX_BYTES, "{bytes}");
        assert!(kept.len() < 12 && kept.back().unwrap().id == "e11");
    }
}
