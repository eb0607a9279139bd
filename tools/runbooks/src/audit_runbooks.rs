//! What `airlock audit verify` checks of runbook runs beyond the chain:
//! that the calls a line claims were made under a runbook version stayed
//! inside that version's file.
//!
//! The chain check collects the claims ([`RunbookLedger`]): each call
//! line that names a runbook run and was sent (`decision: allowed`), with
//! its tool, tier and the bounded arguments' values the line recorded,
//! and each run's start line. [`check_claims`] then holds them to the
//! versions' files, which live in the state store, not in the log:
//!
//! - the run has a `runbook_start` line of the same runbook, version and
//!   execution before its calls;
//! - every call is of a tier the file declares; a change is of a tool it
//!   lists under `[[calls]]`, its recorded values inside the bounds;
//! - a run made at most `max_changes` changes;
//! - a change sent without an approval of its own (`approved_via:
//!   runbook`) is of a version the store has approved.
//!
//! Memory is bounded: at most [`MAX_CLAIMS`] calls are kept, and a run's
//! start only until its execution's end; calls past that are counted as
//! not checked, never silently.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::runbook::Runbook;
use airlock_catalog::spec::Tier;

/// Runbook calls kept for checking, at most.
pub const MAX_CLAIMS: usize = 100_000;

/// One sent call a line claims was made by a runbook run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Claim {
    /// Its line number in the chain (1-based).
    pub line: u64,
    pub runbook: String,
    pub version: String,
    pub run: String,
    pub execution: Option<String>,
    pub tool: String,
    pub tier: Option<Tier>,
    /// The bounded arguments' values as the line recorded them.
    pub args: Map<String, Value>,
    /// Sent without an approval of its own, on the version's.
    pub by_version: bool,
    /// The run's start line came before it, for the same runbook,
    /// version and execution.
    pub started: bool,
    /// It was outside the file and asked for an approval of its own
    /// (`[runbooks] outside_bounds = "ask"`): held to its approval, not
    /// to the bounds.
    pub asked: bool,
}

/// The claims of one chain, in order.
#[derive(Default)]
pub struct RunbookLedger {
    claims: Vec<Claim>,
    /// Runs whose start line was seen, while their execution runs:
    /// runbook, version, execution.
    starts: HashMap<String, (String, String, Option<String>)>,
    /// The runs of each execution, forgotten at its end.
    runs_of: HashMap<String, Vec<String>>,
    unchecked: u64,
}

fn text(record: &Map<String, Value>, key: &str) -> Option<String> {
    record.get(key).and_then(Value::as_str).map(str::to_string)
}

impl RunbookLedger {
    /// Notes line `line` if it starts a run or is a sent call of one.
    pub fn note(&mut self, line: u64, record: &Map<String, Value>) {
        if record.get("event").and_then(Value::as_str) == Some("execution_end") {
            if let Some(x) = record.get("execution").and_then(Value::as_str) {
                for run in self.runs_of.remove(x).unwrap_or_default() {
                    self.starts.remove(&run);
                }
            }
            return;
        }
        let (Some(runbook), Some(version), Some(run)) = (
            text(record, "runbook"),
            text(record, "runbook_version"),
            text(record, "runbook_run"),
        ) else {
            return;
        };
        match record.get("event").and_then(Value::as_str) {
            Some("runbook_start") if self.starts.len() < MAX_CLAIMS => {
                let execution = text(record, "execution");
                if let Some(x) = &execution {
                    self.runs_of.entry(x.clone()).or_default().push(run.clone());
                }
                self.starts.insert(run, (runbook, version, execution));
            }
            Some("call") if record.get("decision").and_then(Value::as_str) == Some("allowed") => {
                if self.claims.len() >= MAX_CLAIMS {
                    self.unchecked += 1;
                    return;
                }
                let execution = text(record, "execution");
                let started = self.starts.get(&run)
                    == Some(&(runbook.clone(), version.clone(), execution.clone()));
                self.claims.push(Claim {
                    line,
                    tool: text(record, "tool").unwrap_or_default(),
                    tier: record
                        .get("tier")
                        .and_then(|t| serde_json::from_value(t.clone()).ok()),
                    args: match record.get("runbook_args") {
                        Some(Value::Object(m)) => m.clone(),
                        _ => Map::new(),
                    },
                    by_version: record.get("approved_via").and_then(Value::as_str)
                        == Some("runbook"),
                    asked: record.contains_key("runbook_outside"),
                    runbook,
                    version,
                    run,
                    execution,
                    started,
                });
            }
            _ => {}
        }
    }

    /// The claims, and how many calls past [`MAX_CLAIMS`] were not kept.
    pub fn finish(self) -> (Vec<Claim>, u64) {
        (self.claims, self.unchecked)
    }
}

/// A version as the check needs it: its parsed file, and whether the
/// store has it approved.
pub struct Known {
    pub runbook: Runbook,
    pub approved: bool,
}

/// Holds `claims` to their versions' files; `known(name, version)` finds
/// a version in the store. Returns each claim that broke a rule: its line
/// and why.
pub fn check_claims(
    claims: &[Claim],
    mut known: impl FnMut(&str, &str) -> Option<Known>,
) -> Vec<(u64, String)> {
    let mut problems = Vec::new();
    let mut versions: HashMap<(String, String), Option<Known>> = HashMap::new();
    let mut changes: HashMap<&str, u32> = HashMap::new();
    for c in claims {
        if !c.started {
            problems.push((
                c.line,
                format!(
                    "{} claims runbook run {} of {} version {}, which has no start line of that version and execution before it",
                    c.tool,
                    c.run,
                    c.runbook,
                    crate::runbook::short(&c.version)
                ),
            ));
            continue;
        }
        let k = versions
            .entry((c.runbook.clone(), c.version.clone()))
            .or_insert_with(|| known(&c.runbook, &c.version));
        let Some(k) = k else {
            problems.push((
                c.line,
                format!(
                    "{} ran under runbook {} version {}, which the runbook store does not have",
                    c.tool,
                    c.runbook,
                    crate::runbook::short(&c.version)
                ),
            ));
            continue;
        };
        if c.asked && !c.by_version {
            continue;
        }
        let Some(tier) = c.tier else {
            problems.push((c.line, format!("{} names no tier to check", c.tool)));
            continue;
        };
        if let Err(e) = k.runbook.check_recorded(&c.tool, tier, &c.args) {
            problems.push((c.line, e.0));
            continue;
        }
        if tier == Tier::Read {
            continue;
        }
        let n = changes.entry(c.run.as_str()).or_default();
        *n += 1;
        if *n > k.runbook.max_changes {
            problems.push((
                c.line,
                format!(
                    "run {} of runbook {} made change {} of at most {} (max_changes)",
                    c.run, c.runbook, n, k.runbook.max_changes
                ),
            ));
        }
        if c.by_version && !k.approved {
            problems.push((
                c.line,
                format!(
                    "{} was sent on the approval of runbook {} version {}, which the store has not approved",
                    c.tool,
                    c.runbook,
                    crate::runbook::short(&c.version)
                ),
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FILE: &str = r#"name = "restart_web"
description = "Reboot the web VMs."
tiers = ["read", "operate"]
max_changes = 1

[[calls]]
tool = "vm_reboot"
args.vmid = { enum = [100, 101] }

[script]
source = "1"
"#;

    fn line(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// The claims of `lines` checked against FILE, approved or not.
    fn problems(lines: &[Value], approved: bool) -> Vec<(u64, String)> {
        let version = crate::runbook::version_of(FILE);
        let mut ledger = RunbookLedger::default();
        for (i, l) in lines.iter().enumerate() {
            let mut l = l.clone();
            if l.get("runbook_version").is_some() {
                l["runbook_version"] = json!(version);
            }
            ledger.note(i as u64 + 1, &line(l));
        }
        let (claims, unchecked) = ledger.finish();
        assert_eq!(unchecked, 0);
        check_claims(&claims, |name, v| {
            (name == "restart_web" && v == version).then(|| Known {
                runbook: Runbook::parse(FILE).unwrap(),
                approved,
            })
        })
    }

    fn start() -> Value {
        json!({"event": "runbook_start", "execution": "x1", "runbook": "restart_web", "runbook_version": "", "runbook_run": "rb-1"})
    }

    fn change(vmid: u64) -> Value {
        json!({"event": "call", "decision": "allowed", "execution": "x1", "tool": "vm_reboot", "tier": "operate",
               "runbook": "restart_web", "runbook_version": "", "runbook_run": "rb-1",
               "runbook_args": {"vmid": vmid}, "approved_via": "runbook"})
    }

    #[test]
    fn calls_inside_the_file_pass() {
        let read = json!({"event": "call", "decision": "allowed", "execution": "x1", "tool": "vm_list", "tier": "read",
                          "runbook": "restart_web", "runbook_version": "", "runbook_run": "rb-1"});
        assert_eq!(problems(&[start(), read, change(100)], true), vec![]);
    }

    #[test]
    fn a_line_claiming_what_the_file_does_not_allow_is_named() {
        // Out of bounds, past max_changes, without a start, unapproved.
        let p = problems(&[start(), change(102)], true);
        assert!(p[0].1.contains("args.vmid"), "{p:?}");
        let p = problems(&[start(), change(100), change(101)], true);
        assert_eq!(p.len(), 1);
        assert!(p[0].1.contains("max_changes") && p[0].0 == 3, "{p:?}");
        let p = problems(&[change(100)], true);
        assert!(p[0].1.contains("no start line"), "{p:?}");
        let p = problems(&[start(), change(100)], false);
        assert!(p[0].1.contains("has not approved"), "{p:?}");
        // A run's start is forgotten at its execution's end: a call after
        // it claims a run that is over.
        let end = json!({"event": "execution_end", "execution": "x1"});
        let p = problems(&[start(), end, change(100)], true);
        assert!(p[0].1.contains("no start line"), "{p:?}");
    }
}
