//! What `airlock audit verify` checks of change plans beyond the chain:
//! the lines of one plan must agree with each other.
//!
//! - A `plan` line's `changes_sha256` is the hash of the list its
//!   execution's `planned` call lines recorded (tool and argument hash, in
//!   change order): the plan filed is the plan the script made.
//! - A plan is taken for applying (`plan_apply`, decision `applying`) at
//!   most once.
//! - Every call allowed under a plan (`plan` and `plan_change` on an
//!   `allowed` call line) is one of that plan's changes, the same tool
//!   with the same argument hash, used once.
//!
//! A log that starts after a plan was recorded (exported in part, or
//! rotated) cannot be checked for it; such plans are skipped, not
//! reported. At most [`MAX_TRACKED`] plans are followed at once, so a
//! log of any length verifies in bounded memory.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::digest::sha256_json;

/// Plans followed at once; past this, new plans are not checked.
pub const MAX_TRACKED: usize = 10_000;

#[derive(Default)]
struct Seen {
    /// (change number, tool, argument hash) from the `planned` lines.
    recorded: Vec<(u64, String, String)>,
    /// Set by the `plan` line: the changes are then fixed.
    filed: bool,
    /// Which changes an apply has used.
    used: HashSet<u64>,
    applying: bool,
}

#[derive(Default)]
pub(crate) struct PlanLedger {
    plans: HashMap<String, Seen>,
    /// Plans whose apply has ended: they must not be applied again.
    applied: HashSet<String>,
}

fn text<'a>(record: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    record.get(key).and_then(Value::as_str)
}

impl PlanLedger {
    /// Takes note of one verified line; `Err` says what disagrees.
    pub(crate) fn note(&mut self, record: &Map<String, Value>) -> Result<(), String> {
        let Some(plan) = text(record, "plan") else {
            return Ok(());
        };
        match (text(record, "event"), text(record, "decision")) {
            (Some("call"), Some("planned")) => {
                let Some(n) = record.get("plan_change").and_then(Value::as_u64) else {
                    return Ok(()); // a read answered by the plan
                };
                if !self.plans.contains_key(plan) && self.plans.len() >= MAX_TRACKED {
                    return Ok(());
                }
                let seen = self.plans.entry(plan.to_string()).or_default();
                if seen.filed {
                    return Err(format!(
                        "a change was recorded for plan {plan} after the plan was filed"
                    ));
                }
                seen.recorded.push((
                    n,
                    text(record, "tool").unwrap_or_default().to_string(),
                    text(record, "args_sha256").unwrap_or_default().to_string(),
                ));
            }
            (Some("plan"), _) => {
                let Some(seen) = self.plans.get_mut(plan) else {
                    return Ok(());
                };
                seen.recorded.sort_by_key(|c| c.0);
                let list: Vec<Value> = seen
                    .recorded
                    .iter()
                    .map(|(_, tool, hash)| {
                        Value::Array(vec![tool.as_str().into(), hash.as_str().into()])
                    })
                    .collect();
                let hash = sha256_json(&Value::Array(list));
                // A name its line may have cut cannot be checked.
                let cut = seen
                    .recorded
                    .iter()
                    .any(|(_, tool, _)| tool.chars().count() >= crate::audit_fields::TOOL_CHARS);
                if !cut && text(record, "changes_sha256") != Some(hash.as_str()) {
                    return Err(format!(
                        "plan {plan}'s line does not match the changes its execution recorded"
                    ));
                }
                seen.filed = true;
            }
            (Some("plan_apply"), Some("applying")) => {
                if self.applied.contains(plan) || self.plans.get(plan).is_some_and(|s| s.applying) {
                    return Err(format!("plan {plan} is applied a second time"));
                }
                if let Some(seen) = self.plans.get_mut(plan) {
                    seen.applying = true;
                }
            }
            (Some("call"), Some("allowed")) => {
                let Some(n) = record.get("plan_change").and_then(Value::as_u64) else {
                    return Ok(());
                };
                let Some(seen) = self.plans.get_mut(plan) else {
                    return Ok(());
                };
                let tool = text(record, "tool").unwrap_or_default();
                let hash = text(record, "args_sha256").unwrap_or_default();
                let planned = seen
                    .recorded
                    .iter()
                    .any(|(m, t, h)| *m == n && t == tool && h == hash);
                if !seen.applying || !planned || !seen.used.insert(n) {
                    return Err(format!(
                        "a call ran as change {n} of plan {plan}, which that plan does not hold (or not unused, or not while it was applied)"
                    ));
                }
            }
            (Some("plan_end"), _) => {
                self.plans.remove(plan);
                if self.applied.len() < MAX_TRACKED * 10 {
                    self.applied.insert(plan.to_string());
                }
            }
            _ => {}
        }
        Ok(())
    }
}
