//! What `airlock audit verify` checks of durable executions beyond the
//! chain: that no execution sent one of its changes twice.
//!
//! A script's calls are numbered in the order it makes them, and a
//! durable execution resumed by replay (after a wait, a restart, a
//! process killed mid-run) makes each call under the number it had: a
//! call line names it (`script_call`) with the tool's tier. A change is
//! sent when its call line says `allowed` (the backend is asked next), so
//! two such lines of one execution under one number are one change sent
//! twice. Reads may go again (sent twice, a read changes nothing), and a
//! call that asked for an approval and was sent once it was given has one
//! `allowed` line.
//!
//! Memory is bounded: an execution's numbers are forgotten at its end
//! line; at most [`MAX_CALLS`] are remembered across the executions still
//! open and [`MAX_FINDINGS`] findings kept; past that they are counted,
//! never silently dropped.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Changes of open executions remembered, at most.
pub const MAX_CALLS: usize = 100_000;
/// Findings kept, at most.
pub const MAX_FINDINGS: usize = 1_000;

/// The changes sent by each open execution, by call number.
#[derive(Default)]
pub struct SendsLedger {
    /// execution → call number → the line that sent it.
    sent: HashMap<String, HashMap<u64, u64>>,
    remembered: usize,
    /// Changes not remembered (past [`MAX_CALLS`]): not checked.
    pub unchecked: u64,
    findings: Vec<(u64, String)>,
    more: u64,
}

fn text<'a>(record: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    record.get(key).and_then(Value::as_str)
}

impl SendsLedger {
    /// Notes line `line`.
    pub fn note(&mut self, line: u64, record: &Map<String, Value>) {
        let Some(execution) = text(record, "execution") else {
            return;
        };
        match text(record, "event") {
            Some("execution_end") => {
                if let Some(calls) = self.sent.remove(execution) {
                    self.remembered -= calls.len();
                }
            }
            Some("call") => {
                let number = record.get("script_call").and_then(Value::as_u64);
                let change = text(record, "tier").is_some_and(|t| t != "read");
                let (Some(number), true, Some("allowed")) =
                    (number, change, text(record, "decision"))
                else {
                    return;
                };
                let first = self.sent.get(execution).and_then(|c| c.get(&number));
                if let Some(first) = first {
                    let tool = text(record, "tool").unwrap_or("?");
                    let why = format!(
                        "execution {execution} sent its change #{number} ({tool}) a second time; line {first} sent it first"
                    );
                    if self.findings.len() < MAX_FINDINGS {
                        self.findings.push((line, why));
                    } else {
                        self.more += 1;
                    }
                } else if self.remembered < MAX_CALLS {
                    self.sent
                        .entry(execution.to_string())
                        .or_default()
                        .insert(number, line);
                    self.remembered += 1;
                } else {
                    self.unchecked += 1;
                }
            }
            _ => {}
        }
    }

    /// The findings (line, why) and how many more were not kept.
    pub fn finish(self) -> (Vec<(u64, String)>, u64, u64) {
        (self.findings, self.more, self.unchecked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_change_sent_twice_under_one_number_is_found_and_reads_are_not() {
        let mut l = SendsLedger::default();
        let call = |n: u64, tier: &str, decision: &str| {
            line(json!({"event": "call", "execution": "x1", "script_call": n,
                "tier": tier, "tool": "vm_shutdown", "decision": decision}))
        };
        l.note(1, &call(1, "change", "approval_required"));
        l.note(2, &call(1, "change", "allowed"));
        l.note(3, &call(2, "read", "allowed"));
        l.note(4, &call(2, "read", "allowed"));
        l.note(5, &call(1, "change", "allowed"));
        // Another execution's numbers are its own.
        l.note(
            6,
            &line(json!({"event": "call", "execution": "x2", "script_call": 1,
                "tier": "change", "tool": "vm_shutdown", "decision": "allowed"})),
        );
        // Once ended, an execution's numbers are forgotten.
        l.note(
            7,
            &line(json!({"event": "execution_end", "execution": "x2"})),
        );
        let (findings, more, unchecked) = l.finish();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].0, 5);
        assert!(findings[0].1.contains("#1 (vm_shutdown)"));
        assert!(findings[0].1.contains("line 2"));
        assert_eq!((more, unchecked), (0, 0));
    }
}
