//! Applying an approved plan: its steps are made one at a time, in the
//! plan's order, each only after the previous one's backend answer, and
//! the first failure stops it.
//!
//! Why one at a time: the person approved a sequence ("back up, then
//! destroy"; "stop VM 555, then VM 101"). A script that sends the steps
//! together (`Promise.all`, `Promise.allSettled`) would otherwise have
//! step 2 on its way while step 1 is failing. So every call that could be
//! a step waits for its turn ([`Applying::turn`]) before it is admitted,
//! and keeps it until its answer is in; whatever the script does with
//! promises, at most one step is in flight.
//!
//! What stops a plan: a change whose backend call fails, a step whose
//! call is cancelled before its answer (the change may or may not have
//! been made), and a read of a change's result (a wait for its task)
//! that fails or finds the task ended other than OK. After a stop, a call
//! that is one of the plan's later changes is refused unsent
//! (`plan_stopped`); the report and `plan_end` count as applied only the
//! changes that succeeded.
//!
//! When the plan is used up: when its first change is about to be sent
//! ([`Taking::Step`] with `first`), not when the execution starts. An
//! execution that is refused, does not compile, is cancelled or sends
//! nothing leaves the plan approved until it expires.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::plan::{PlannedChange, Recorder};
use airlock_catalog::spec::Tier;

/// The longest answer of a change kept to recognise a later read of it
/// (a Proxmox task id is under 100 bytes).
const MAX_RESULT_BYTES: usize = 1024;

/// Why a plan stopped: the step, and what happened to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub at: u32,
    /// A short code: the backend's error code, `cancelled`, or the
    /// task's exit status.
    pub why: String,
}

/// What a call is to the plan being applied.
#[derive(Debug, PartialEq, Eq)]
pub enum Taking<'a> {
    /// The plan's next step: admitted as it, without an approval of its
    /// own. `first`: the plan is not used yet, and must be taken from the
    /// store before this step is sent.
    Step {
        change: &'a PlannedChange,
        first: bool,
    },
    /// One of the plan's later changes, after the plan stopped.
    Stopped(Stop),
    /// Not a step of the plan (now): decided as without a plan.
    NotInPlan,
}

/// The tool a call calls: its catalog name and stable key.
#[derive(Clone, Copy, Debug)]
pub struct Called<'a> {
    pub name: &'a str,
    pub key: &'a str,
}

impl Called<'_> {
    /// Whether this is the tool of step `c`: by key, when the plan has
    /// one (a name can move to another tool; a key cannot), else by name.
    fn is(&self, c: &PlannedChange) -> bool {
        if c.key.is_empty() {
            c.tool == self.name
        } else {
            c.key == self.key
        }
    }
}

/// How a step ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepEnd {
    /// Made. For a change, what it answered that a later read may carry
    /// (its task id), when short enough to look for.
    Made(Option<String>),
    /// A read of a task that has not ended yet: the same step again.
    NotEnded,
    /// The plan stops here.
    Failed(String),
}

/// An approved plan being applied by one execution.
#[derive(Debug)]
pub struct Applying {
    pub id: String,
    pub changes: Vec<PlannedChange>,
    /// Held by a call that may be a step, from before its admission until
    /// its answer is in.
    turn: tokio::sync::Mutex<()>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The store's row is used (this execution took it); who approved it.
    taken: Option<Option<String>>,
    /// Steps made: they are made in order, so the first `made`.
    made: usize,
    /// The step admitted and not yet answered.
    in_flight: Option<usize>,
    stopped: Option<Stop>,
    /// What each made change answered, for the reads of it.
    results: Vec<Option<String>>,
}

impl Applying {
    /// A plan read from the store, not taken yet.
    pub fn new(id: String, changes: Vec<PlannedChange>) -> Self {
        let results = vec![None; changes.len()];
        Self {
            id,
            changes,
            turn: tokio::sync::Mutex::new(()),
            state: Mutex::new(State {
                results,
                ..State::default()
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a call of `tool` at `tier` could be one of this plan's
    /// steps, and so must wait for its turn: every change, and a read of
    /// a tool the plan reads a change's result with.
    pub fn may_be_step(&self, tool: &Called<'_>, tier: Tier) -> bool {
        tier != Tier::Read
            || self
                .changes
                .iter()
                .any(|c| c.waits_on.is_some() && tool.is(c))
    }

    /// Waits until no step is in flight; hold the guard until the call's
    /// answer is in.
    pub async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// What this call is to the plan. A change matches the next step when
    /// it has the same tool and argument hash, at the tier it was planned
    /// at, and, if that tier needs an approval now, was planned as
    /// needing one; a read matches the next step when that step reads
    /// change *k*'s result with this tool and the arguments carry what
    /// change *k* answered. A match is in flight until [`Applying::ended`]
    /// or [`Applying::untake`].
    pub fn take(
        &self,
        tool: &Called<'_>,
        args_hash: &str,
        tier: Tier,
        needs_approval_now: bool,
        args: &Value,
    ) -> Taking<'_> {
        let mut s = self.state();
        let is_change = |c: &PlannedChange| {
            c.is_change()
                && tool.is(c)
                && c.args_hash == args_hash
                && c.tier == tier
                && (c.needs_approval || !needs_approval_now)
        };
        if let Some(stop) = &s.stopped {
            let later = self.changes.iter().skip(s.made).any(is_change);
            return if later && tier != Tier::Read {
                Taking::Stopped(stop.clone())
            } else {
                Taking::NotInPlan
            };
        }
        if s.in_flight.is_some() {
            // Only a caller without the turn gets here: not a step now.
            return Taking::NotInPlan;
        }
        let Some(next) = self.changes.get(s.made) else {
            return Taking::NotInPlan;
        };
        let matches = match next.waits_on {
            None => is_change(next),
            Some(k) => {
                tool.is(next)
                    && tier == Tier::Read
                    && s.results
                        .get(k.saturating_sub(1) as usize)
                        .and_then(Option::as_deref)
                        .is_some_and(|r| crate::plan::carries(args, r))
            }
        };
        if !matches {
            return Taking::NotInPlan;
        }
        s.in_flight = Some(s.made);
        Taking::Step {
            change: next,
            first: s.taken.is_none(),
        }
    }

    /// The store's row was used for this execution (when its first change
    /// was admitted); `approved_by` goes on each applied call's line.
    pub fn mark_taken(&self, approved_by: Option<String>) {
        self.state().taken = Some(approved_by);
    }

    /// Whether this execution took the plan (sent, or was about to send,
    /// its first change).
    pub fn taken(&self) -> bool {
        self.state().taken.is_some()
    }

    /// Who approved the plan, once taken.
    pub fn approved_by(&self) -> Option<String> {
        self.state().taken.clone().flatten()
    }

    /// The step in flight was refused before it was sent (its audit line
    /// could not be written): still the next one.
    pub fn untake(&self) {
        self.state().in_flight = None;
    }

    /// The step in flight ended so.
    pub fn ended(&self, end: StepEnd) {
        let mut s = self.state();
        let Some(i) = s.in_flight.take() else { return };
        match end {
            StepEnd::Made(result) => {
                s.results[i] = result.filter(|r| !r.is_empty() && r.len() <= MAX_RESULT_BYTES);
                s.made = i + 1;
            }
            StepEnd::NotEnded => {}
            StepEnd::Failed(why) => {
                s.stopped.get_or_insert(Stop {
                    at: self.changes[i].n,
                    why,
                });
            }
        }
    }

    /// Stops the plan before any further step (its first change could not
    /// be taken from the store, or taken and not recorded).
    pub fn stop_before_next(&self, why: &str) {
        let mut s = self.state();
        let at = self.changes.get(s.made).map_or(0, |c| c.n);
        s.in_flight = None;
        s.stopped.get_or_insert(Stop {
            at,
            why: why.into(),
        });
    }

    /// Why the plan stopped, if it did.
    pub fn stopped(&self) -> Option<Stop> {
        self.state().stopped.clone()
    }

    /// The step the plan makes next, if any is left.
    pub fn next_change(&self) -> Option<&PlannedChange> {
        self.changes.get(self.state().made)
    }

    /// Changes made (reads of their results left out).
    pub fn applied(&self) -> Vec<&PlannedChange> {
        let made = self.state().made;
        self.changes[..made]
            .iter()
            .filter(|c| c.is_change())
            .collect()
    }

    /// Changes not made, the one that failed included.
    pub fn not_applied(&self) -> Vec<&PlannedChange> {
        let made = self.state().made;
        self.changes[made..]
            .iter()
            .filter(|c| c.is_change())
            .collect()
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
    use serde_json::json;

    fn change(n: u32, tool: &str, hash: &str) -> PlannedChange {
        PlannedChange {
            n,
            tool: tool.into(),
            key: String::new(),
            tier: Tier::Operate,
            args_hash: hash.into(),
            summary: String::new(),
            target: String::new(),
            needs_approval: true,
            waits_on: None,
            detail: None,
        }
    }

    fn wait(n: u32, on: u32) -> PlannedChange {
        PlannedChange {
            tier: Tier::Read,
            needs_approval: false,
            waits_on: Some(on),
            ..change(n, "task_wait", "planned")
        }
    }

    fn t(name: &str) -> Called<'_> {
        Called { name, key: "" }
    }

    #[test]
    fn a_step_with_a_key_matches_that_tool_whatever_its_name() {
        let mut c = change(1, "q_x_restart", "a");
        c.key = "q:x.restart".into();
        let a = Applying::new("pl-1".into(), vec![c]);
        let moved = Called {
            name: "q_x_restart",
            key: "q:x_restart",
        };
        assert_eq!(
            a.take(&moved, "a", Tier::Operate, true, &json!({})),
            Taking::NotInPlan
        );
        let renamed = Called {
            name: "q_x_dot_restart",
            key: "q:x.restart",
        };
        assert!(is_step(a.take(&renamed, "a", Tier::Operate, true, &json!({}))).is_some());
    }

    fn is_step(t: Taking<'_>) -> Option<(u32, bool)> {
        match t {
            Taking::Step { change, first } => Some((change.n, first)),
            _ => None,
        }
    }

    #[test]
    fn steps_go_in_order_one_at_a_time() {
        let a = Applying::new(
            "pl-1".into(),
            vec![change(1, "vm_stop", "a"), change(2, "vm_stop", "b")],
        );
        let op = Tier::Operate;
        let none = json!({});
        assert_eq!(
            a.take(&t("vm_stop"), "b", op, true, &none),
            Taking::NotInPlan
        );
        assert_eq!(
            a.take(&t("vm_start"), "a", op, true, &none),
            Taking::NotInPlan
        );
        assert_eq!(
            a.take(&t("vm_stop"), "a", Tier::Admin, true, &none),
            Taking::NotInPlan
        );
        assert_eq!(
            is_step(a.take(&t("vm_stop"), "a", op, true, &none)),
            Some((1, true))
        );
        a.mark_taken(Some("op".into()));
        // While change 1 is in flight, nothing else is a step.
        assert_eq!(
            a.take(&t("vm_stop"), "b", op, true, &none),
            Taking::NotInPlan
        );
        a.ended(StepEnd::Made(Some("UPID:1".into())));
        assert_eq!(
            is_step(a.take(&t("vm_stop"), "b", op, true, &none)),
            Some((2, false))
        );
        a.ended(StepEnd::Made(None));
        assert_eq!(a.applied().len(), 2);
        assert!(a.not_applied().is_empty());
        assert_eq!(a.approved_by().as_deref(), Some("op"));
    }

    #[test]
    fn a_failure_stops_the_plan_and_later_changes_are_refused() {
        let a = Applying::new(
            "pl-1".into(),
            vec![change(1, "vm_stop", "a"), change(2, "vm_stop", "b")],
        );
        let none = json!({});
        assert!(is_step(a.take(&t("vm_stop"), "a", Tier::Operate, true, &none)).is_some());
        a.ended(StepEnd::Failed("backend_error".into()));
        let stop = Stop {
            at: 1,
            why: "backend_error".into(),
        };
        assert_eq!(
            a.take(&t("vm_stop"), "b", Tier::Operate, true, &none),
            Taking::Stopped(stop.clone())
        );
        assert_eq!(
            a.take(&t("vm_stop"), "a", Tier::Operate, true, &none),
            Taking::Stopped(stop.clone())
        );
        assert_eq!(
            a.take(&t("vm_stop"), "c", Tier::Operate, true, &none),
            Taking::NotInPlan
        );
        assert_eq!(a.stopped(), Some(stop));
        assert!(a.applied().is_empty());
        assert_eq!(a.not_applied().len(), 2, "the failed change is not applied");
    }

    #[test]
    fn a_wait_matches_the_result_of_its_change_and_a_failed_task_stops() {
        let a = Applying::new(
            "pl-1".into(),
            vec![
                change(1, "vm_backup", "a"),
                wait(2, 1),
                change(3, "vm_destroy", "c"),
            ],
        );
        assert!(a.may_be_step(&t("task_wait"), Tier::Read));
        assert!(!a.may_be_step(&t("vm_list"), Tier::Read));
        let op = Tier::Operate;
        assert!(is_step(a.take(&t("vm_backup"), "a", op, true, &json!({}))).is_some());
        a.mark_taken(None);
        a.ended(StepEnd::Made(Some("UPID:pve1:9".into())));
        // The destroy before the wait: not the next step.
        assert_eq!(
            a.take(&t("vm_destroy"), "c", op, true, &json!({})),
            Taking::NotInPlan
        );
        // A wait on another task: not the step.
        let other = json!({"upid": "UPID:pve1:8"});
        assert_eq!(
            a.take(&t("task_wait"), "x", Tier::Read, false, &other),
            Taking::NotInPlan
        );
        let mine = json!({"upid": "UPID:pve1:9"});
        assert_eq!(
            is_step(a.take(&t("task_wait"), "x", Tier::Read, false, &mine)),
            Some((2, false))
        );
        a.ended(StepEnd::NotEnded);
        assert_eq!(a.next_change().map(|c| c.n), Some(2), "still waiting");
        assert!(is_step(a.take(&t("task_wait"), "y", Tier::Read, false, &mine)).is_some());
        a.ended(StepEnd::Failed("backup failed".into()));
        assert!(matches!(
            a.take(&t("vm_destroy"), "c", op, true, &json!({})),
            Taking::Stopped(Stop { at: 2, .. })
        ));
        assert_eq!(a.applied().len(), 1);
        assert_eq!(a.not_applied().iter().map(|c| c.n).collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn a_step_refused_before_it_was_sent_is_still_next() {
        let a = Applying::new("pl-1".into(), vec![change(1, "vm_stop", "a")]);
        assert!(is_step(a.take(&t("vm_stop"), "a", Tier::Operate, true, &json!({}))).is_some());
        a.untake();
        assert_eq!(
            is_step(a.take(&t("vm_stop"), "a", Tier::Operate, true, &json!({}))),
            Some((1, true))
        );
        a.ended(StepEnd::Made(Some("x".repeat(MAX_RESULT_BYTES + 1))));
        assert!(a.state().results[0].is_none(), "a long answer is not kept");
        let b = Applying::new("pl-2".into(), vec![change(1, "vm_stop", "a")]);
        let mut free = change(1, "vm_stop", "a");
        free.needs_approval = false;
        let c = Applying::new("pl-3".into(), vec![free]);
        assert_eq!(
            c.take(&t("vm_stop"), "a", Tier::Operate, true, &json!({})),
            Taking::NotInPlan,
            "planned as needing no approval, it needs one now"
        );
        b.stop_before_next("plan_used");
        assert!(matches!(
            b.take(&t("vm_stop"), "a", Tier::Operate, true, &json!({})),
            Taking::Stopped(Stop { at: 1, .. })
        ));
    }
}
