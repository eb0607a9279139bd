//! What `airlock audit verify` checks of four eyes beyond the chain: that
//! no line records a person approving what they asked, wrote or ran
//! under another spelling of their name ([`airlock_approver::person`]).
//!
//! Before names were compared canonically, `--by Olga` could approve
//! what `olga` asked, and the lines then say so in plain sight: the
//! requester and the approver differ as text and are one person. Flagged:
//!
//! - a decision (`approval_decision`, `plan_decision`) that approved,
//!   whose `decided_by` is the requester's `identity` in another
//!   spelling (the same spelling is `approve_own`, which the store
//!   allowed and the line marks `own`);
//! - a call sent on an approval (`approved_by`) given by its own
//!   identity in another spelling;
//! - a runbook version approved (`runbook_approved`) by its author in
//!   any spelling: no setting lets an author approve their own version.
//!   The author is on the approval's line, or on the version's
//!   `runbook_added` line for chains written before it was.
//!
//! Memory is bounded: at most [`MAX_VERSIONS`] versions' authors are
//! remembered and [`MAX_FINDINGS`] findings kept; past that they are
//! counted, never silently dropped.

use std::collections::HashMap;

use serde_json::{Map, Value};

use airlock_approver::person;

/// Runbook versions whose authors are remembered, at most.
pub const MAX_VERSIONS: usize = 10_000;
/// Findings kept, at most.
pub const MAX_FINDINGS: usize = 1_000;

/// The four-eyes findings of one chain, in order.
#[derive(Default)]
pub struct PeopleLedger {
    findings: Vec<(u64, String)>,
    more: u64,
    /// Who added each runbook version: (runbook, version) → author.
    authors: HashMap<(String, String), String>,
}

fn text<'a>(record: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    record.get(key).and_then(Value::as_str)
}

/// A name as it was given: lines write names escaped for a terminal
/// (`visible`: `\u{200b}` for a zero-width space), which would hide the
/// very spelling this looks for.
fn unescaped(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find("\\u{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        let code = after
            .find('}')
            .filter(|end| *end <= 6)
            .and_then(|end| {
                u32::from_str_radix(&after[..end], 16)
                    .ok()
                    .map(|c| (c, end))
            })
            .and_then(|(c, end)| char::from_u32(c).map(|c| (c, end)));
        match code {
            Some((c, end)) => {
                out.push(c);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("\\u{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn disguised(a: &str, b: &str) -> bool {
    person::disguised(&unescaped(a), &unescaped(b))
}

fn same(a: &str, b: &str) -> bool {
    person::same(&unescaped(a), &unescaped(b))
}

impl PeopleLedger {
    /// Notes line `line`.
    pub fn note(&mut self, line: u64, record: &Map<String, Value>) {
        match text(record, "event") {
            Some("approval_decision" | "plan_decision") => {
                let (Some(asked), Some(by)) =
                    (text(record, "identity"), text(record, "decided_by"))
                else {
                    return;
                };
                if text(record, "status") == Some("approved") && disguised(asked, by) {
                    self.find(
                        line,
                        format!("{by} approved a request {asked} asked: one person, spelt two ways (four eyes)"),
                    );
                }
            }
            Some("call") => {
                let (Some(who), Some(by)) = (text(record, "identity"), text(record, "approved_by"))
                else {
                    return;
                };
                if disguised(who, by) {
                    self.find(
                        line,
                        format!("{who}'s call was sent on an approval by {by}: one person, spelt two ways (four eyes)"),
                    );
                }
            }
            Some(event @ ("runbook_added" | "runbook_approved")) => {
                let (Some(name), Some(version), Some(by)) = (
                    text(record, "runbook"),
                    text(record, "runbook_version"),
                    text(record, "by"),
                ) else {
                    return;
                };
                let key = (name.to_string(), version.to_string());
                if event == "runbook_added" {
                    if self.authors.len() < MAX_VERSIONS || self.authors.contains_key(&key) {
                        self.authors.insert(key, by.to_string());
                    }
                    return;
                }
                let author = text(record, "author").or(self.authors.get(&key).map(String::as_str));
                if let Some(author) = author {
                    if same(author, by) {
                        let short = airlock_runbooks::runbook::short(version);
                        self.find(
                            line,
                            format!("{by} approved version {short} of runbook {name}, which {author} added: an author never approves their own version (four eyes)"),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn find(&mut self, line: u64, why: String) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push((line, why));
        } else {
            self.more += 1;
        }
    }

    /// The findings, and how many past [`MAX_FINDINGS`] were not kept.
    pub fn finish(self) -> (Vec<(u64, String)>, u64) {
        (self.findings, self.more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn findings(lines: &[Value]) -> Vec<(u64, String)> {
        let mut ledger = PeopleLedger::default();
        for (i, l) in lines.iter().enumerate() {
            ledger.note(i as u64 + 1, l.as_object().unwrap());
        }
        ledger.finish().0
    }

    #[test]
    fn one_person_in_two_spellings_is_flagged() {
        let f = findings(&[
            json!({"event": "approval_decision", "identity": "olga", "decided_by": "Olga", "status": "approved", "own": false}),
            json!({"event": "plan_decision", "identity": "olga", "decided_by": "OLGA", "status": "approved"}),
            json!({"event": "call", "identity": "olga", "approved_by": "Olga"}),
            json!({"event": "runbook_added", "runbook": "r", "runbook_version": "abcdef0123456789", "by": "alice"}),
            json!({"event": "runbook_approved", "runbook": "r", "runbook_version": "abcdef0123456789", "by": "Alice"}),
            json!({"event": "runbook_approved", "runbook": "s", "runbook_version": "0123", "by": "bob", "author": "bob"}),
            json!({"event": "runbook_approved", "runbook": "t", "runbook_version": "0124", "by": "ol\\u{200b}ga", "author": "olga"}),
        ]);
        assert_eq!(
            f.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            vec![1, 2, 3, 5, 6, 7],
            "{f:?}"
        );
        assert!(
            f[3].1.contains("runbook r") && f[3].1.contains("alice added"),
            "{f:?}"
        );
    }

    #[test]
    fn other_people_and_allowed_own_approvals_pass() {
        let f = findings(&[
            // approve_own: the same spelling, marked own by the store.
            json!({"event": "approval_decision", "identity": "olga", "decided_by": "olga", "status": "approved", "own": true}),
            // Refusing one's own request is always allowed.
            json!({"event": "approval_decision", "identity": "olga", "decided_by": "Olga", "status": "denied"}),
            json!({"event": "approval_decision", "identity": "olga", "decided_by": "bob", "status": "approved"}),
            json!({"event": "call", "identity": "olga", "approved_by": "bob"}),
            json!({"event": "runbook_approved", "runbook": "r", "runbook_version": "01", "by": "bob", "author": "alice"}),
        ]);
        assert!(f.is_empty(), "{f:?}");
    }
}
