//! Change plans: a script run once to record the changes it would make,
//! approved once as a whole, then run again to make exactly those.
//!
//! Recording (`PlanRun::Record`): reads run as usual (asked for approval
//! if their tier needs it); every call of a
//! tier above `read` passes rate limit, lookup, validation and policy as
//! always, then is written down instead of sent and answered with a value
//! the backend shapes ([`crate::Backend::planned`]). A read whose
//! arguments carry such a value (waiting for a planned task) is answered
//! by the backend's [`crate::Backend::planned_read`], never sent: the
//! task does not exist.
//!
//! Filing: the recorded changes go to the approval store as one request
//! bound to the identity and the SHA-256 of the ordered list of
//! (tool, argument hash): [`list_hash`]. The person deciding sees
//! [`table`].
//!
//! A read whose arguments carry the planned value of change *k* (a wait
//! for its task, its status) is a step of the plan too, recorded as
//! reading change *k*'s result (`waits_on`): it is what the person
//! approves the later changes after. Other reads are not steps: whatever
//! they tell the script reaches a change only through that change's
//! arguments, which the plan binds by hash.
//!
//! Applying (`PlanRun::Apply`, [`crate::plan_apply`]): one step at a time,
//! in the plan's order, each after the previous one's answer; the plan is
//! taken (approved → used, atomically) when its first change is about to
//! be sent. A used or expired plan can never be taken again.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use airlock_catalog::{
    digest::sha256_json,
    spec::{Tier, ToolSpec},
};

/// The `tool` column of a plan's row in the approval store: no tool can
/// be named so, so a plan never matches a single call's check.
pub const PLAN_TOOL: &str = "(plan)";

/// The most changes one plan holds: a person reads every one of them.
pub const MAX_PLAN_CHANGES: usize = 100;

/// The most characters of argument summaries one plan holds in all.
pub const MAX_PLAN_SUMMARY_CHARS: usize = 20_000;

/// The most characters of arguments shown in full (`approvals show`) one
/// plan holds in all.
pub const MAX_PLAN_DETAIL_CHARS: usize = 262_144;

/// One change a plan holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedChange {
    /// Its place in the plan, from 1.
    pub n: u32,
    /// The tool's catalog name when the plan was recorded, shown.
    pub tool: String,
    /// The tool's stable key ([`airlock_catalog::ToolSpec::key`]), which applying
    /// matches: a name a backend moved to another tool since does not
    /// match. Empty in plans from before keys (then the name is matched).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    pub tier: Tier,
    /// SHA-256 of the canonical arguments, as an approval binds them.
    pub args_hash: String,
    /// The arguments as an approver sees them in a list
    /// (`summary::Rendered::short`).
    pub summary: String,
    /// The arguments in full, when the summary had to summarise a long
    /// value (`airlock approvals show ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What it acts on: the arguments that name the object (the tool's
    /// path parameters, `node=pve1 vmid=101`).
    pub target: String,
    /// Whether this change's tier needs an approval; those that do not
    /// are listed for the person to see and run on apply as they would
    /// without a plan.
    pub needs_approval: bool,
    /// For a read of an earlier change's result (a wait for its task):
    /// that change's number. Applying, this step is the read whose
    /// arguments carry what change `waits_on` answered; a task it finds
    /// ended other than OK, or a failed read, stops the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_on: Option<u32>,
}

impl PlannedChange {
    /// Whether this step changes something (it is not a read of an
    /// earlier change's result).
    pub fn is_change(&self) -> bool {
        self.waits_on.is_none()
    }
}

/// The SHA-256 an approved plan is bound to: its steps' tools and
/// argument hashes, in order, and for a read of an earlier change's
/// result, which change it reads.
pub fn list_hash(changes: &[PlannedChange]) -> String {
    let items: Vec<Value> = changes.iter().map(list_item).collect();
    sha256_json(&Value::Array(items))
}

/// One step as [`list_hash`] hashes it (and `audit verify` rebuilds it
/// from the step's line): tool and argument hash, then which change a
/// read reads, then the tool's key.
pub fn list_item(c: &PlannedChange) -> Value {
    let mut item = vec![json!(c.tool), json!(c.args_hash)];
    if let Some(k) = c.waits_on {
        item.push(json!(k));
    }
    if !c.key.is_empty() {
        item.push(json!({ "key": c.key }));
    }
    Value::Array(item)
}

/// The plan as the person deciding reads it, one step per line.
pub fn table(changes: &[PlannedChange]) -> String {
    let mut out = String::new();
    for c in changes {
        let note = match (c.waits_on, c.needs_approval) {
            (Some(k), _) => {
                format!(", reads change {k}'s task: it must end OK, else the plan stops")
            }
            (None, true) => String::new(),
            (None, false) => ", no approval needed".into(),
        };
        out.push_str(&format!(
            "{:>3}. {} [{}{note}] {}\n",
            c.n, c.tool, c.tier, c.summary
        ));
    }
    out
}

/// `node=pve1 vmid=101`: the values of the tool's path parameters, which
/// name what the call acts on.
pub fn target_of(spec: &ToolSpec, args: &Value) -> String {
    spec.path_params
        .iter()
        .filter_map(|p| {
            let v = args.get(p)?;
            let shown = match v {
                Value::String(s) => airlock_catalog::visible::visible(s),
                other => other.to_string(),
            };
            Some(format!("{p}={shown}"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a plan cannot be recorded further, filed or applied. Each names
/// what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("no plan with id {0}; a plan's id comes from an execute in plan mode (`mode: \"plan\"`), and `airlock approvals list` shows the open ones")]
    NotFound(String),
    #[error("plan {0} belongs to another identity; run the script in plan mode as yourself")]
    OtherIdentity(String),
    #[error("plan {id} is {status}, not approved; {what}")]
    NotApproved {
        id: String,
        status: &'static str,
        what: String,
    },
    #[error("plan {0} has been applied already; a plan applies once: run the script in plan mode again for a new one")]
    Used(String),
    #[error("plan {0} has expired; run the script in plan mode again for a new one")]
    Expired(String),
    #[error("plan {0} does not match what was approved (its stored changes were altered), so nothing of it runs; run the script in plan mode again")]
    Tampered(String),
    #[error("the plan would hold more than {limit} changes, more than a person can review at once; split the work into smaller scripts")]
    TooManyChanges { limit: usize },
    #[error("the plan's changes take more than {limit} characters to show; pass smaller arguments or split the work")]
    TooLong { limit: usize },
    #[error("plan {id} stopped at step {at} ({why}), so this change of it is not made; the changes after a failed one need a new plan")]
    Stopped { id: String, at: u32, why: String },
    #[error("the approval store is unavailable: {0}")]
    Storage(String),
}

impl PlanError {
    /// The code a script or client sees.
    pub fn code(&self) -> &'static str {
        match self {
            PlanError::NotFound(_) => "plan_not_found",
            PlanError::OtherIdentity(_) => "plan_other_identity",
            PlanError::NotApproved { .. } => "plan_not_approved",
            PlanError::Used(_) => "plan_used",
            PlanError::Expired(_) => "plan_expired",
            PlanError::Tampered(_) => "plan_tampered",
            PlanError::TooManyChanges { .. } | PlanError::TooLong { .. } => "plan_too_large",
            PlanError::Stopped { .. } => "plan_stopped",
            PlanError::Storage(_) => "approval_unavailable",
        }
    }
}

/// The changes a plan-mode execution has recorded so far.
#[derive(Debug)]
pub struct Recorder {
    /// The plan's id: also its approval request's id, and the mark of
    /// every planned value handed to the script.
    pub id: String,
    changes: Mutex<Recorded>,
    /// A change was recorded whose audit line could not be written: the
    /// plan is not filed.
    unrecorded: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Recorded {
    changes: Vec<PlannedChange>,
    summary_chars: usize,
    detail_chars: usize,
}

impl Recorder {
    pub fn new() -> Result<Self, PlanError> {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes)
            .map_err(|e| PlanError::Storage(format!("no randomness for an id: {e}")))?;
        Ok(Self {
            id: format!("pl-{}", hex::encode(bytes)),
            changes: Mutex::default(),
            unrecorded: Default::default(),
        })
    }

    /// Adds a change; returns the token its planned value carries
    /// (`pl-….n`).
    pub fn record(&self, mut change: PlannedChange) -> Result<String, PlanError> {
        let mut r = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        if r.changes.len() >= MAX_PLAN_CHANGES {
            return Err(PlanError::TooManyChanges {
                limit: MAX_PLAN_CHANGES,
            });
        }
        let chars = change.summary.chars().count() + change.target.chars().count();
        if r.summary_chars + chars > MAX_PLAN_SUMMARY_CHARS {
            return Err(PlanError::TooLong {
                limit: MAX_PLAN_SUMMARY_CHARS,
            });
        }
        let detail = change.detail.as_ref().map_or(0, |d| d.chars().count());
        if r.detail_chars + detail > MAX_PLAN_DETAIL_CHARS {
            return Err(PlanError::TooLong {
                limit: MAX_PLAN_DETAIL_CHARS,
            });
        }
        r.summary_chars += chars;
        r.detail_chars += detail;
        change.n = r.changes.len() as u32 + 1;
        let token = format!("{}.{}", self.id, change.n);
        r.changes.push(change);
        Ok(token)
    }

    /// Marks the plan as holding a change the audit log lacks.
    pub fn lost_a_line(&self) {
        self.unrecorded
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether every change has its audit line.
    pub fn complete(&self) -> bool {
        !self.unrecorded.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether `args` carries a value this plan handed out.
    pub fn marks(&self, args: &Value) -> bool {
        carries(args, &self.id)
    }

    /// The latest change whose planned value `args` carries (the `n` of
    /// a `pl-….n` mark naming a change this plan recorded), if any: the
    /// change a read of it waits on. A mark a script made up (step 0, a
    /// step not recorded, a read's number) names none.
    pub fn marked_change(&self, args: &Value) -> Option<u32> {
        let mark = format!("{}.", self.id);
        let recorded = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let is_change = |n: u32| {
            n >= 1
                && recorded
                    .changes
                    .get(n as usize - 1)
                    .is_some_and(PlannedChange::is_change)
        };
        let mut found = None;
        each_string(args, &mut |s| {
            for (at, _) in s.match_indices(&mark) {
                let digits: String = s[at + mark.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .take(4)
                    .collect();
                if let Ok(n) = digits.parse::<u32>() {
                    if is_change(n) {
                        found = found.max(Some(n));
                    }
                }
            }
        });
        found
    }

    pub fn changes(&self) -> Vec<PlannedChange> {
        self.changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .changes
            .clone()
    }
}

/// Whether `id` has the shape of a plan id (`pl-` and 16 hex digits):
/// anything else is refused before any store is asked.
pub fn is_plan_id(id: &str) -> bool {
    id.len() == 19 && id.starts_with("pl-") && id[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether any string in `v` (a key or a value, at any depth) holds
/// `mark`.
pub(crate) fn carries(v: &Value, mark: &str) -> bool {
    match v {
        Value::String(s) => s.contains(mark),
        Value::Array(a) => a.iter().any(|x| carries(x, mark)),
        Value::Object(m) => m.iter().any(|(k, x)| k.contains(mark) || carries(x, mark)),
        _ => false,
    }
}

/// Calls `f` with every string in `v`, keys included, at any depth.
fn each_string(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().for_each(|x| each_string(x, f)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            f(k);
            each_string(x, f)
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(tool: &str, hash: &str) -> PlannedChange {
        PlannedChange {
            n: 0,
            tool: tool.into(),
            tier: Tier::Operate,
            args_hash: hash.into(),
            summary: "node=pve1".into(),
            target: "node=pve1".into(),
            needs_approval: true,
            waits_on: None,
            detail: None,
            key: String::new(),
        }
    }

    #[test]
    fn the_list_hash_binds_order_tools_and_arguments() {
        let a = [change("vm_stop", "h1"), change("vm_stop", "h2")];
        let b = [change("vm_stop", "h2"), change("vm_stop", "h1")];
        let c = [change("vm_start", "h1"), change("vm_stop", "h2")];
        assert_ne!(list_hash(&a), list_hash(&b));
        assert_ne!(list_hash(&a), list_hash(&c));
        assert_eq!(list_hash(&a), list_hash(&a.clone()));
    }

    #[test]
    fn a_recorder_numbers_changes_and_stops_at_its_limits() {
        let r = Recorder::new().unwrap();
        let t = r.record(change("vm_stop", "h")).unwrap();
        assert_eq!(t, format!("{}.1", r.id));
        assert!(r.marks(&json!({"upid": format!("UPID:x:{t}:")})));
        assert!(is_plan_id(&r.id), "{}", r.id);
        for not in [
            "pl-",
            "pl-0123456789abcdeg",
            "ap-0123456789abcdef",
            "pl-0123456789abcdef0",
        ] {
            assert!(!is_plan_id(not), "{not}");
        }
        assert!(!r.marks(&json!({"upid": "UPID:x:pl-other.1:"})));
        for _ in 1..MAX_PLAN_CHANGES {
            r.record(change("vm_stop", "h")).unwrap();
        }
        assert_eq!(
            r.record(change("vm_stop", "h")),
            Err(PlanError::TooManyChanges {
                limit: MAX_PLAN_CHANGES
            })
        );
        let long = Recorder::new().unwrap();
        let mut big = change("vm_stop", "h");
        big.summary = "x".repeat(MAX_PLAN_SUMMARY_CHARS);
        assert!(matches!(long.record(big), Err(PlanError::TooLong { .. })));
        assert!(long.changes().is_empty(), "a refused change is not kept");
    }

    #[test]
    fn a_read_names_the_latest_change_it_carries() {
        let r = Recorder::new().unwrap();
        for _ in 0..12 {
            r.record(change("vm_stop", "h")).unwrap();
        }
        let mut read = change("task_wait", "h");
        read.waits_on = Some(1);
        r.record(read).unwrap(); // step 13 reads change 1
        let id = &r.id;
        for made_up in [0, 13, 14, 99] {
            assert_eq!(
                r.marked_change(&json!({"upid": format!("{id}.{made_up}")})),
                None,
                "{made_up}"
            );
        }
        assert_eq!(r.marked_change(&json!({"upid": "UPID:x"})), None);
        assert_eq!(
            r.marked_change(&json!({"upid": format!("UPID:n:0:0:0:x::airlock-plan@{id}.3:")})),
            Some(3)
        );
        assert_eq!(
            r.marked_change(&json!({"a": [format!("{id}.2"), {format!("{id}.12"): 1}]})),
            Some(12)
        );
        assert_eq!(
            r.marked_change(&json!({"upid": "pl-0000000000000000.1"})),
            None
        );
        let mut wait = change("task_wait", "h");
        wait.waits_on = Some(1);
        assert!(!wait.is_change());
        let plain = [change("vm_stop", "h")];
        assert_ne!(
            list_hash(&[plain[0].clone(), wait.clone()]),
            list_hash(&[plain[0].clone(), {
                let mut w = wait.clone();
                w.waits_on = Some(2);
                w
            }]),
            "which change a read waits on is bound"
        );
        assert!(table(&[wait]).contains("reads change 1's task"));
    }
}
