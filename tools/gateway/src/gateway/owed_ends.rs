//! End lines the audit chain is owed: an execution that ended while the
//! store could not be written, and a start whose write failed (it may
//! still have been committed: a database that froze can commit an insert
//! after its caller gave up and told the client nothing runs).
//!
//! Each is kept here and written when the store takes lines again — after
//! the next line this gateway writes, when `/healthz` finds the store
//! back ([`Gateway::write_owed_ends`]), and when the gateway is dropped —
//! marked `ended_during_outage` with the time it ended, so `audit verify`
//! sees every execution end and tells the outage's from the others. An
//! end for a start that was never committed matches no start and opens
//! nothing. At most [`MAX_OWED_ENDS`] are kept; past that the oldest go,
//! counted on the next line written (`owed_ends_dropped`).

use std::collections::VecDeque;

use super::*;

/// End lines kept for writing later, at most.
pub const MAX_OWED_ENDS: usize = 10_000;

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

    /// Writes the owed end lines, oldest first, until the store refuses
    /// one (it stays owed). Returns how many were written.
    pub fn write_owed_ends(&self) -> usize {
        let mut written = 0;
        loop {
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
            if let Err(e) = self.state.audit.append("execution_end", to_write) {
                tracing::debug!(error = %e, "owed end lines still wait for the audit store");
                let mut owed = self.owed_ends.lock().unwrap_or_else(|p| p.into_inner());
                owed.lines.push_front(line);
                owed.dropped += dropped;
                return written;
            }
            written += 1;
        }
    }
}
