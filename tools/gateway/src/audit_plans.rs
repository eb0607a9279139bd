//! What `airlock audit verify` checks of change plans beyond the chain:
//! the lines of one plan must agree with each other.
//!
//! - A `plan` line's `changes_sha256` is the hash of the list its
//!   execution's `planned` call lines recorded (tool and argument hash, in
//!   change order): the plan filed is the plan the script made.
//! - A plan is taken for applying (`plan_apply`, decision `applying`) at
//!   most once.
//! - Every call allowed under a plan (`plan` and `plan_change` on an
//!   `allowed` call line) is that plan's next step: the same tool with
//!   the same argument hash (for a read of a change's result, the same
//!   tool reading the same change), in the plan's order, once.
//! - A step is admitted only after the step before it has its result
//!   line, and no step after one that failed (a result other than `ok`,
//!   or a task found ended other than OK).
//!
//! A log that starts after a plan was recorded (exported in part, or
//! rotated) cannot be checked for it; such plans are skipped. Memory is
//! bounded: a plan is followed while it can still be applied — recording
//! ends with its execution, a plan not filed for approval or denied is
//! dropped at once, a filed one after two of the longest approval
//! lifetimes — and at most [`MAX_TRACKED`] at once; plans past that are
//! counted as not checked ([`PlanLedger::unchecked`]), never silently.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::MAX_TTL_SECS;

/// Plans followed at once (filed ones hold 40 bytes per change).
pub const MAX_TRACKED: usize = 10_000;

/// Closed plans remembered, against an apply or a call under one.
const MAX_CLOSED: usize = 100_000;

/// A planned change once its plan is filed: its number and the digest of
/// its tool and argument hash.
type Change = (u64, [u8; 32]);

fn change_digest(tool: &str, hash: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(hash.as_bytes());
    h.finalize().into()
}

/// A step's digest as applying matches it: a change by its tool (its
/// key, where the line has one) and argument hash, a read of change *k*'s
/// result by its tool and *k* (its arguments carry a value only the apply
/// knows).
fn step_digest(record: &Map<String, Value>) -> [u8; 32] {
    let tool = text(record, "tool_key")
        .or_else(|| text(record, "tool"))
        .unwrap_or_default();
    match record.get("waits_on").and_then(Value::as_u64) {
        Some(k) => change_digest(tool, &format!("waits_on:{k}")),
        None => change_digest(tool, text(record, "args_sha256").unwrap_or_default()),
    }
}

enum Seen {
    /// Its execution is recording: the changes so far (one line each, in
    /// change order), and the hash of their list, fed as they come.
    Recording {
        changes: Vec<Change>,
        list: Sha256,
        /// A tool name its line may have cut: the hash cannot be checked.
        cut: bool,
    },
    /// Filed, waiting or approved: its changes in order, how many are
    /// made, whether an apply has taken it, the call of the step in
    /// flight, whether a step failed, and when it was filed (unix
    /// seconds).
    Filed {
        changes: Vec<Change>,
        made: usize,
        applying: bool,
        in_flight: Option<String>,
        failed: bool,
        filed_s: u64,
    },
}

#[derive(Default)]
pub(crate) struct PlanLedger {
    plans: HashMap<String, Seen>,
    /// Which execution records which plan, so its end lets go of it.
    recording: HashMap<String, String>,
    /// New plans turned away at the cap since the last sweep for old ones.
    turned_away: u64,
    /// Plans that can never be applied (again): their apply ended, they
    /// were denied, or they were never filed for approval.
    closed: HashSet<String>,
    /// Plans not followed because too many were open at once.
    unchecked: u64,
    /// The call of each plan's step in flight → its plan, so its result
    /// line can be found.
    steps_in_flight: HashMap<String, String>,
}

fn text<'a>(record: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    record.get(key).and_then(Value::as_str)
}

fn unix_seconds(record: &Map<String, Value>) -> u64 {
    text(record, "ts")
        .and_then(|ts| humantime::parse_rfc3339(ts).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

impl PlanLedger {
    /// Plans that could not be followed (more than [`MAX_TRACKED`] open
    /// at once).
    pub(crate) fn unchecked(&self) -> u64 {
        self.unchecked
    }

    /// Takes note of one verified line; `Err` says what disagrees.
    pub(crate) fn note(&mut self, record: &Map<String, Value>) -> Result<(), String> {
        let event = text(record, "event");
        if event == Some("call_result") {
            return self.step_result(record);
        }
        if event == Some("execution_end") {
            // A recording that filed nothing is over.
            if let Some(plan) = text(record, "execution").and_then(|x| self.recording.remove(x)) {
                if matches!(self.plans.get(&plan), Some(Seen::Recording { .. })) {
                    self.plans.remove(&plan);
                }
            }
            return Ok(());
        }
        // Airlock writes no other plan ids: anything else is not followed.
        let Some(plan) = text(record, "plan").filter(|p| crate::plan::is_plan_id(p)) else {
            return Ok(());
        };
        let decision = text(record, "decision");
        let acts = matches!(
            (event, decision),
            (Some("plan_apply"), Some("applying")) | (Some("call"), Some("allowed"))
        );
        let under_plan = event == Some("plan_apply") || record.contains_key("plan_change");
        if acts && under_plan && self.closed.contains(plan) {
            return Err(format!(
                "plan {plan} is acted on after it was closed (its apply ended, it was denied, or it was never filed for approval)"
            ));
        }
        match (event, decision) {
            (Some("call"), Some("planned")) => {
                let Some(n) = record.get("plan_change").and_then(Value::as_u64) else {
                    return Ok(()); // a read answered by the plan
                };
                // A plan is followed from its first change or not at all.
                if !self.plans.contains_key(plan) && (n != 1 || !self.room(record)) {
                    return Ok(());
                }
                let tool = text(record, "tool").unwrap_or_default();
                let hash = text(record, "args_sha256").unwrap_or_default();
                let seen = self.plans.entry(plan.to_string()).or_insert_with(|| {
                    let mut list = Sha256::new();
                    list.update(b"[");
                    Seen::Recording {
                        changes: Vec::new(),
                        list,
                        cut: false,
                    }
                });
                let Seen::Recording { changes, list, cut } = seen else {
                    return Err(format!(
                        "a change was recorded for plan {plan} after the plan was filed"
                    ));
                };
                if n != changes.len() as u64 + 1 || n as usize > crate::plan::MAX_PLAN_CHANGES {
                    return Err(format!(
                        "plan {plan} records change {n} after {} (changes are recorded in order, at most {})",
                        changes.len(),
                        crate::plan::MAX_PLAN_CHANGES
                    ));
                }
                if n > 1 {
                    list.update(b",");
                }
                // The item as canonical JSON writes it (`plan::list_item`).
                let mut item = vec![Value::from(tool), Value::from(hash)];
                if let Some(k) = record.get("waits_on").and_then(Value::as_u64) {
                    item.push(Value::from(k));
                }
                if let Some(key) = text(record, "tool_key") {
                    item.push(serde_json::json!({ "key": key }));
                    *cut |= key.chars().count() >= crate::audit_fields::TOOL_KEY_CHARS;
                }
                list.update(
                    serde_json::to_string(&Value::Array(item))
                        .unwrap_or_default()
                        .as_bytes(),
                );
                *cut |= tool.chars().count() >= crate::audit_fields::TOOL_CHARS;
                changes.push((n, step_digest(record)));
                if let Some(x) = text(record, "execution") {
                    if n == 1 {
                        self.recording.insert(x.to_string(), plan.to_string());
                    }
                }
            }
            (Some("plan"), _) => {
                let Some(Seen::Recording {
                    changes,
                    mut list,
                    cut,
                }) = self.plans.remove(plan)
                else {
                    return Ok(());
                };
                list.update(b"]");
                let hash = hex::encode(list.finalize());
                if !cut && text(record, "changes_sha256") != Some(hash.as_str()) {
                    return Err(format!(
                        "plan {plan}'s line does not match the changes its execution recorded"
                    ));
                }
                // Only a plan filed for approval can ever be applied.
                if text(record, "status") != Some("pending") {
                    self.close(plan);
                } else {
                    self.plans.insert(
                        plan.to_string(),
                        Seen::Filed {
                            changes,
                            made: 0,
                            applying: false,
                            in_flight: None,
                            failed: false,
                            filed_s: unix_seconds(record),
                        },
                    );
                }
            }
            (Some("plan_decision"), _) if text(record, "status") == Some("denied") => {
                self.forget(plan);
                self.close(plan);
            }
            (Some("plan_apply"), Some("applying")) => {
                if matches!(
                    self.plans.get(plan),
                    Some(Seen::Filed { applying: true, .. })
                ) {
                    return Err(format!("plan {plan} is applied a second time"));
                }
                if let Some(Seen::Filed { applying, .. }) = self.plans.get_mut(plan) {
                    *applying = true;
                }
            }
            (Some("call"), Some("allowed")) => {
                let Some(n) = record.get("plan_change").and_then(Value::as_u64) else {
                    return Ok(());
                };
                let Some(Seen::Filed {
                    changes,
                    made,
                    applying,
                    in_flight,
                    failed,
                    ..
                }) = self.plans.get_mut(plan)
                else {
                    return Ok(());
                };
                if *failed {
                    return Err(format!(
                        "step {n} of plan {plan} was admitted after a step of it failed"
                    ));
                }
                if in_flight.is_some() {
                    return Err(format!(
                        "step {n} of plan {plan} was admitted before the step before it had its result"
                    ));
                }
                let next = changes.get(*made);
                if !*applying || next != Some(&(n, step_digest(record))) {
                    return Err(format!(
                        "a call ran as change {n} of plan {plan}, which is not that plan's next change (or not while it was applied)"
                    ));
                }
                if let Some(call) = text(record, "call") {
                    *in_flight = Some(call.to_string());
                    self.steps_in_flight
                        .insert(call.to_string(), plan.to_string());
                }
            }
            (Some("plan_end"), _) => {
                self.forget(plan);
                self.close(plan);
            }
            _ => {}
        }
        Ok(())
    }

    /// A step's result line: the step is made (a task read that found
    /// the task still running leaves it the next step), or it failed and
    /// the plan admits nothing more.
    fn step_result(&mut self, record: &Map<String, Value>) -> Result<(), String> {
        let Some(plan) = text(record, "call").and_then(|c| self.steps_in_flight.remove(c)) else {
            return Ok(());
        };
        let Some(Seen::Filed {
            made,
            in_flight,
            failed,
            ..
        }) = self.plans.get_mut(&plan)
        else {
            return Ok(());
        };
        *in_flight = None;
        let ok = text(record, "status") == Some("ok");
        match (ok, text(record, "task")) {
            (true, None | Some("ok")) => *made += 1,
            (true, Some("running")) => {}
            _ => *failed = true,
        }
        Ok(())
    }

    /// Stops following `plan`, and its step in flight.
    fn forget(&mut self, plan: &str) {
        if let Some(Seen::Filed {
            in_flight: Some(call),
            ..
        }) = self.plans.remove(plan)
        {
            self.steps_in_flight.remove(&call);
        }
    }

    fn close(&mut self, plan: &str) {
        if self.closed.len() < MAX_CLOSED {
            self.closed.insert(plan.to_string());
        } else {
            self.unchecked += 1;
        }
    }

    /// Whether another plan can be followed: at the cap, filed plans too
    /// old to be approved or applied any more are let go first.
    fn room(&mut self, record: &Map<String, Value>) -> bool {
        // Sweeping walks every plan: at most once per 1,000 turned away.
        if self.plans.len() >= MAX_TRACKED && self.turned_away.is_multiple_of(1_000) {
            let now = unix_seconds(record);
            let lifetime = 2 * MAX_TTL_SECS;
            self.plans.retain(|_, s| match s {
                Seen::Filed { filed_s, .. } => now.saturating_sub(*filed_s) <= lifetime,
                Seen::Recording { .. } => true,
            });
            let plans = &self.plans;
            self.steps_in_flight.retain(|_, p| plans.contains_key(p));
        }
        if self.plans.len() >= MAX_TRACKED {
            self.turned_away += 1;
            self.unchecked += 1;
            return false;
        }
        true
    }
}
