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
//! Applying (`PlanRun::Apply`): the approved plan is taken, once
//! (approved → used, atomically), and each call that is the plan's next
//! change — same tool, same argument hash, same tier; in the plan's
//! order — proceeds without an approval of its own; anything else is
//! decided as without a plan. What the run did not make is reported as
//! not applied. A used or expired
//! plan can never be taken again.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{
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

/// One change a plan holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedChange {
    /// Its place in the plan, from 1.
    pub n: u32,
    pub tool: String,
    pub tier: Tier,
    /// SHA-256 of the canonical arguments, as an approval binds them.
    pub args_hash: String,
    /// The arguments as an approver sees them (`summary::summarize`).
    pub summary: String,
    /// What it acts on: the arguments that name the object (the tool's
    /// path parameters, `node=pve1 vmid=101`).
    pub target: String,
    /// Whether this change's tier needs an approval; those that do not
    /// are listed for the person to see and run on apply as they would
    /// without a plan.
    pub needs_approval: bool,
}

/// The SHA-256 an approved plan is bound to: its changes' tools and
/// argument hashes, in order.
pub fn list_hash(changes: &[PlannedChange]) -> String {
    let pairs: Vec<Value> = changes
        .iter()
        .map(|c| json!([c.tool, c.args_hash]))
        .collect();
    sha256_json(&Value::Array(pairs))
}

/// The plan as the person deciding reads it, one change per line.
pub fn table(changes: &[PlannedChange]) -> String {
    let mut out = String::new();
    for c in changes {
        out.push_str(&format!(
            "{:>3}. {} [{}{}] {}\n",
            c.n,
            c.tool,
            c.tier,
            if c.needs_approval {
                ""
            } else {
                ", no approval needed"
            },
            c.summary
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
                Value::String(s) => crate::visible::visible(s),
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
        what: &'static str,
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
    #[error("the approval store is unavailable: {0}")]
    Storage(String),
}

impl From<crate::approval::ApprovalError> for PlanError {
    fn from(e: crate::approval::ApprovalError) -> Self {
        use crate::approval::ApprovalError as A;
        match e {
            A::NotFound(id) => PlanError::NotFound(id),
            A::Expired(id) => PlanError::Expired(id),
            // The store's own words, for the gateway to say as it says
            // every store failure (no host, no server text).
            A::Storage(m) => PlanError::Storage(m),
            other => PlanError::Storage(other.to_string()),
        }
    }
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
        r.summary_chars += chars;
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

/// Writes a decision on a plan to the audit chain: who decided, how, and
/// the hash of the list they saw.
pub fn record_decision(
    audit: &dyn crate::audit::AuditStore,
    request: &crate::approval::Request,
) -> Result<(), crate::audit::AuditError> {
    let mut line = serde_json::Map::new();
    line.insert("plan".into(), Value::String(request.id.clone()));
    line.insert("identity".into(), Value::String(request.identity.clone()));
    line.insert(
        "status".into(),
        Value::String(request.status.as_str().into()),
    );
    if let Some(by) = &request.decided_by {
        line.insert("decided_by".into(), crate::audit_fields::decider(by));
    }
    line.insert(
        "changes_sha256".into(),
        Value::String(request.args_hash.clone()),
    );
    audit.append("plan_decision", line).map(|_| ())
}

fn carries(v: &Value, mark: &str) -> bool {
    match v {
        Value::String(s) => s.contains(mark),
        Value::Array(a) => a.iter().any(|x| carries(x, mark)),
        Value::Object(m) => m.iter().any(|(k, x)| k.contains(mark) || carries(x, mark)),
        _ => false,
    }
}

/// An approved plan being applied by one execution.
#[derive(Debug)]
pub struct Applying {
    pub id: String,
    /// Who approved it, for each applied change's audit line.
    pub approved_by: Option<String>,
    pub changes: Vec<PlannedChange>,
    /// How many changes have been made: they are made in the plan's
    /// order, so the used ones are always the first `next`.
    next: Mutex<usize>,
    /// The change whose backend call failed, if one did: no change after
    /// it is made.
    stopped: Mutex<Option<u32>>,
}

impl Applying {
    pub fn new(id: String, approved_by: Option<String>, changes: Vec<PlannedChange>) -> Self {
        Self {
            id,
            approved_by,
            changes,
            next: Mutex::new(0),
            stopped: Mutex::new(None),
        }
    }

    /// Gives change `n` back when the call taking it was refused before it
    /// was sent (its audit line could not be written): still the next one.
    pub fn untake(&self, n: u32) {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        if *next == n as usize && n > 0 {
            *next -= 1;
        }
    }

    /// Change `n` failed at the backend: no later change is made.
    pub fn stop_at(&self, n: u32) {
        let mut stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        stopped.get_or_insert(n);
    }

    /// The change that failed and stopped the plan, if one did.
    pub fn stopped_at(&self) -> Option<u32> {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Uses the plan's next change if it is exactly this call: the same
    /// tool and argument hash, at the tier it was planned at, and, if the
    /// tier needs an approval now, one planned as needing it. A change
    /// is only ever made after every change before it: the person
    /// approved a sequence (add a rule, then delete the first; back up,
    /// then destroy), and a subset or another order can mean another
    /// change. Anything else is `None`, and is decided without the plan.
    pub fn take(
        &self,
        tool: &str,
        args_hash: &str,
        tier: Tier,
        needs_approval_now: bool,
    ) -> Option<&PlannedChange> {
        if self.stopped_at().is_some() {
            return None;
        }
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let c = self.changes.get(*next)?;
        let same = c.tool == tool
            && c.args_hash == args_hash
            && c.tier == tier
            && (c.needs_approval || !needs_approval_now);
        if !same {
            return None;
        }
        *next += 1;
        Some(c)
    }

    /// The change the plan makes next, if any is left.
    pub fn next_change(&self) -> Option<&PlannedChange> {
        let next = *self.next.lock().unwrap_or_else(|p| p.into_inner());
        self.changes.get(next)
    }

    /// Changes the run did not make.
    pub fn not_applied(&self) -> Vec<&PlannedChange> {
        let next = *self.next.lock().unwrap_or_else(|p| p.into_inner());
        self.changes.iter().skip(next).collect()
    }
}

/// What a caller's execution does with changes.
#[derive(Clone, Debug)]
pub enum PlanRun {
    Record(Arc<Recorder>),
    Apply(Arc<Applying>),
}

impl PartialEq for PlanRun {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PlanRun::Record(a), PlanRun::Record(b)) => Arc::ptr_eq(a, b),
            (PlanRun::Apply(a), PlanRun::Apply(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for PlanRun {}

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
    fn applying_uses_each_change_once_and_reports_the_rest() {
        let mut changes = vec![change("vm_stop", "a"), change("vm_stop", "b")];
        changes[0].n = 1;
        changes[1].n = 2;
        let a = Applying::new("pl-1".into(), None, changes);
        let op = Tier::Operate;
        assert!(a.take("vm_stop", "b", op, true).is_none(), "out of order");
        assert!(a.take("vm_start", "a", op, true).is_none(), "another tool");
        assert!(
            a.take("vm_stop", "a", Tier::Admin, true).is_none(),
            "another tier"
        );
        assert_eq!(a.take("vm_stop", "a", op, true).map(|c| c.n), Some(1));
        assert!(a.take("vm_stop", "a", op, true).is_none(), "used once");
        assert_eq!(a.next_change().map(|c| c.n), Some(2));
        let left: Vec<u32> = a.not_applied().iter().map(|c| c.n).collect();
        assert_eq!(left, [2]);
        let mut free = change("vm_stop", "c");
        free.needs_approval = false;
        free.n = 1;
        let b = Applying::new("pl-2".into(), None, vec![free]);
        assert!(
            b.take("vm_stop", "c", op, true).is_none(),
            "planned as needing no approval, it needs one now"
        );
        assert!(b.take("vm_stop", "c", op, false).is_some());
        b.untake(1);
        assert_eq!(b.next_change().map(|c| c.n), Some(1), "given back");
        let c = Applying::new(
            "pl-3".into(),
            None,
            vec![change("vm_stop", "d"), change("vm_stop", "e")],
        );
        assert!(c.take("vm_stop", "d", op, true).is_some());
        c.stop_at(1);
        assert!(
            c.take("vm_stop", "e", op, true).is_none(),
            "stopped by a failure"
        );
        assert_eq!(c.stopped_at(), Some(1));
    }
}
