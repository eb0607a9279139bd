//! End lines the audit chain is owed: an execution that ended while the
//! store could not be written, and a start whose write failed (it may
//! still have been committed: a database that froze can commit an insert
//! after its caller gave up and told the client nothing runs).
//!
//! Each is kept here and written when the store takes lines again — a
//! few after each execution's end ([`ON_A_REQUEST`]), the rest in the
//! background when `/healthz` finds the store back, and what is left when
//! the gateway is dropped ([`Gateway::write_owed_ends`], one writer at a
//! time) — marked `ended_during_outage` with the time it ended, so `audit
//! verify` sees every execution end and tells the outage's from the
//! others. An end for a start that was never committed matches no start
//! and opens nothing. Only a store that could not be reached owes a line
//! (a line too long is refused for good). At most [`MAX_OWED_ENDS`] are
//! kept; past that the oldest go, logged and counted on the next line
//! written (`owed_ends_dropped`).

use std::collections::VecDeque;

use super::*;

/// End lines kept for writing later, at most.
pub const MAX_OWED_ENDS: usize = 10_000;

/// Owed lines an execution's end writes after its own, at most: the first
/// execution after an outage does not pay for all of it.
pub const ON_A_REQUEST: usize = 16;

/// Owed lines one background round writes, at most.
pub const IN_THE_BACKGROUND: usize = 500;

/// The ends waiting, and how many had to be let go.
#[derive(Default)]
pub(super) struct OwedEnds {
    lines: VecDeque<Map<String, Value>>,
    dropped: u64,
}

impl Gateway {
    /// Keeps `line` (an `execution_end`'s fields) for writing when the
    /// store is back.
    pub(super) fn owe_end(&self, mut line: Map<String, Value>) {
        line.insert("ended_during_outage".into(), Value::Bool(true));
        line.insert("ended".into(), Value::String(rfc3339_ms(self.now_ms())));
        let mut owed = self.owed_ends.lock().unwrap_or_else(|p| p.into_inner());
        if owed.lines.len() >= MAX_OWED_ENDS {
            owed.lines.pop_front();
            if owed.dropped == 0 {
                tracing::warn!(
                    kept = MAX_OWED_ENDS,
                    "more end lines are owed to the audit chain than are kept: the oldest are let go, and the next line written counts them"
                );
            }
            owed.dropped += 1;
        }
        owed.lines.push_back(line);
    }

    /// The end line of an execution whose start could not be written:
    /// nothing of it ran, whatever the store kept.
    pub(super) fn owe_never_ran(&self, caller: &Caller, execution: &str) {
        let mut line = Map::new();
        line.insert("execution".into(), Value::String(execution.into()));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        line.insert("outcome".into(), Value::String("NotStarted".into()));
        line.insert("never_ran".into(), Value::Bool(true));
        line.insert("tool_calls".into(), Value::from(0));
        self.owe_end(line);
    }

    /// How many end lines wait for the store.
    pub fn owed_ends(&self) -> usize {
        self.owed_ends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lines
            .len()
    }

    /// Writes at most `max` owed end lines, oldest first, until the store
    /// refuses one (it stays owed while the store cannot be reached, and
    /// is let go, logged, otherwise). One writer at a time: a caller that
    /// finds another writing returns at once. Returns how many were
    /// written.
    pub fn write_owed_ends(&self, max: usize) -> usize {
        use std::sync::atomic::Ordering;
        if self.owed_writing.swap(true, Ordering::SeqCst) {
            return 0;
        }
        let written = self.write_owed(max);
        self.owed_writing.store(false, Ordering::SeqCst);
        written
    }

    fn write_owed(&self, max: usize) -> usize {
        let mut written = 0;
        for _ in 0..max {
            let (line, dropped) = {
                let mut owed = self.owed_ends.lock().unwrap_or_else(|p| p.into_inner());
                match owed.lines.pop_front() {
                    Some(l) => (l, std::mem::take(&mut owed.dropped)),
                    None => return written,
                }
            };
            let mut to_write = line.clone();
            if dropped > 0 {
                to_write.insert("owed_ends_dropped".into(), Value::from(dropped));
            }
            match self.state.audit.append("execution_end", to_write) {
                Ok(_) => written += 1,
                Err(e) if e.unreachable() => {
                    tracing::debug!(error = %e, "owed end lines still wait for the audit store");
                    let mut owed = self.owed_ends.lock().unwrap_or_else(|p| p.into_inner());
                    owed.lines.push_front(line);
                    owed.dropped += dropped;
                    return written;
                }
                Err(e) => {
                    tracing::warn!(error = %e, execution = ?line.get("execution"), "an owed end line cannot be written at all; it is let go");
                    let mut owed = self.owed_ends.lock().unwrap_or_else(|p| p.into_inner());
                    owed.dropped += dropped + 1;
                }
            }
        }
        written
    }
}
