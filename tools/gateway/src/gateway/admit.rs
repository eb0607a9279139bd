//! The steps before a call may go out: rate limit, lookup, validation,
//! policy and approval, each adding what it learned to the call's audit
//! line.

use super::*;
use airlock_runbooks::runbook::{Admitted, RunbookRun};

impl Gateway {
    /// Rate limit, lookup, validation, policy and approval. Adds what it
    /// learns to the audit line.
    pub(super) fn admit<'c>(
        &self,
        catalog: &'c Catalog,
        caller: &Caller,
        name: &str,
        args: &Value,
        args_hash: &str,
        line: &mut Map<String, Value>,
    ) -> Result<&'c airlock_catalog::catalog::Entry, CallError> {
        // Charged before anything else, whatever the call turns out to be.
        self.take_token(&caller.identity)?;
        if catalog::name_too_long(name).is_some() {
            return Err(CallError::NameTooLong {
                name: quote_name(name),
                bytes: name.len(),
            });
        }
        let entry = match catalog.get(name) {
            Some(entry) => entry,
            None => {
                return Err(match self.unavailable_for(name) {
                    Some(why) => CallError::Backend {
                        tool: quote_name(name),
                        code: "unavailable".into(),
                        message: format!("{}: {why}", quote_name(name)),
                    },
                    None => CallError::UnknownTool {
                        name: quote_name(name),
                        did_you_mean: catalog.suggest(name),
                    },
                })
            }
        };
        let spec = &entry.spec;
        line.insert("tool_key".into(), audit_fields::tool_key(&spec.key));
        line.insert("tier".into(), Value::String(spec.tier.as_str().into()));
        let problems = entry.problems(args);
        if !problems.is_empty() {
            return Err(CallError::InvalidArguments {
                tool: spec.name.clone(),
                problems,
            });
        }
        self.policy
            .decide(&caller.identity, caller.from_groups, spec, catalog)
            .map_err(|d| CallError::PolicyDenied {
                tool: spec.name.clone(),
                reason: d.0,
            })?;
        let needs_approval = self.approval_tiers.contains(&spec.tier);
        if let Some(run) = &caller.runbook {
            if self.runbook_admits(caller, run, spec, args, needs_approval, line)? {
                return Ok(entry);
            }
        }
        match &caller.plan {
            // Recording: nothing above a read is sent, so nothing is
            // approved now; the plan is, as a whole. A read runs, so it
            // is approved as always.
            Some(PlanRun::Record(_)) if spec.tier != Tier::Read => return Ok(entry),
            // A read the plan answers is not sent: nothing to approve.
            Some(PlanRun::Record(r)) if r.marked_change(args).is_some() => return Ok(entry),
            Some(PlanRun::Apply(plan)) if plan.may_be_step(&called(spec), spec.tier) => {
                match plan.take(&called(spec), args_hash, spec.tier, needs_approval, args) {
                    // Taken from the store, if it is the first, once its
                    // backend slot is held (`run_admitted`).
                    Taking::Step { change, .. } => {
                        line.insert("plan".into(), Value::String(plan.id.clone()));
                        line.insert("plan_change".into(), Value::from(change.n));
                        if let Some(k) = change.waits_on {
                            line.insert("waits_on".into(), Value::from(k));
                        }
                        return Ok(entry);
                    }
                    Taking::Stopped(stop) => {
                        line.insert("plan".into(), Value::String(plan.id.clone()));
                        return Err(CallError::Plan {
                            tool: spec.name.clone(),
                            error: PlanError::Stopped {
                                id: plan.id.clone(),
                                at: stop.at,
                                why: stop.why,
                            },
                        });
                    }
                    Taking::NotInPlan => {}
                }
            }
            _ => {}
        }
        if needs_approval {
            let shown = self.shown(&spec.name, args)?;
            let asked = Asked {
                identity: &caller.identity,
                tool: &spec.name,
                tool_key: &spec.key,
                args_hash,
                summary: &shown.short,
                detail: shown.full.as_deref(),
            };
            let now = self.now_ms();
            let check = self
                .state
                .approvals
                .check(&asked, now)
                .map_err(|e| CallError::ApprovalUnavailable(told(&e)))?;
            match check {
                Check::Proceed {
                    request_id,
                    decided_by,
                    decided_via,
                    own,
                } => {
                    line.insert("approval".into(), Value::String(request_id));
                    // Who granted it, how, and whether it was the
                    // requester belong in the tamper-evident chain, not
                    // only in the (mutable) approval store.
                    if let Some(by) = decided_by {
                        line.insert("approved_by".into(), audit_fields::decider(&by));
                    }
                    if let Some(via) = decided_via {
                        line.insert("approved_via".into(), audit_fields::code(&via));
                    }
                    if own {
                        line.insert("approved_own".into(), Value::Bool(true));
                    }
                }
                Check::Required(r) => {
                    // Filed by this check (an older one is only found again).
                    if r.created_ms == now {
                        self.tell_filed(&r);
                    }
                    line.insert("approval".into(), Value::String(r.id.clone()));
                    let mut how = self.approve_instruction(&r.id);
                    if let Some(PlanRun::Apply(plan)) = &caller.plan {
                        line.insert("plan".into(), Value::String(plan.id.clone()));
                        let next = match (plan.stopped(), plan.next_change()) {
                            (Some(stop), _) => {
                                format!("it stopped at step {} ({})", stop.at, stop.why)
                            }
                            (None, Some(c)) => {
                                format!("its next change is {}. {} ({})", c.n, c.tool, c.summary)
                            }
                            (None, None) => "every change of it is made".into(),
                        };
                        how = format!(
                            "this call is not the next change of plan {} ({next}; changes are made in the plan's order, once each, and a changed argument makes another call), so it needs an approval of its own: {how}",
                            plan.id
                        );
                    }
                    return Err(CallError::ApprovalRequired {
                        tool: spec.name.clone(),
                        how,
                        request_id: r.id,
                        summary: r.summary,
                    });
                }
                Check::TooManyOpen { limit } => {
                    return Err(CallError::ApprovalLimit {
                        tool: spec.name.clone(),
                        identity: caller.identity.clone(),
                        limit,
                        list_command: self.list_command(),
                    });
                }
                Check::Denied(r) => {
                    line.insert("approval".into(), Value::String(r.id.clone()));
                    return Err(CallError::ApprovalDenied {
                        tool: spec.name.clone(),
                        request_id: r.id.clone(),
                        reason: crate::approval::denial(&r),
                    });
                }
            }
        }
        Ok(entry)
    }

    /// Holds a call of a runbook's script to its file: `Ok(true)` when
    /// it may go on without an approval of its own (a change of an
    /// approved version inside its bounds), `Ok(false)` when it goes on
    /// as any call (a read, or outside the bounds where the deployment
    /// asks), `Err` when it is refused unsent.
    fn runbook_admits(
        &self,
        caller: &Caller,
        run: &RunbookRun,
        spec: &ToolSpec,
        args: &Value,
        needs_approval: bool,
        line: &mut Map<String, Value>,
    ) -> Result<bool, CallError> {
        let rb = &run.runbook;
        line.insert("runbook".into(), Value::String(rb.name.clone()));
        line.insert("runbook_version".into(), Value::String(rb.version.clone()));
        line.insert("runbook_run".into(), Value::String(run.id.clone()));
        let refused = |why: String| CallError::Runbook {
            tool: spec.name.clone(),
            runbook: rb.name.clone(),
            reason: why,
        };
        let key = self.summary_key()?;
        match run.admit(&spec.name, spec.tier, args, &key) {
            Admitted::Read => Ok(false),
            Admitted::Ask { why } => {
                line.insert("runbook_outside".into(), audit_fields::reason(&why));
                Ok(false)
            }
            Admitted::Refused { why } => Err(refused(why)),
            Admitted::Change { bound } => {
                line.insert("runbook_args".into(), Value::Object(bound));
                if !needs_approval {
                    return Ok(true);
                }
                let by = run.approved_by.as_deref().unwrap_or_default();
                // Four eyes: a person who approved a version does not
                // thereby approve their own calls through it.
                if airlock_approver::person::same(by, &caller.identity)
                    && !self.may_approve_own(caller)
                {
                    return Err(refused(format!(
                        "{by} approved this version of runbook {}, and approvals of one's own calls are off: another operator approves it",
                        rb.name
                    )));
                }
                line.insert("approved_by".into(), audit_fields::decider(by));
                line.insert("approved_via".into(), audit_fields::code("runbook"));
                Ok(true)
            }
        }
    }

    /// Takes one of `identity`'s calls this minute (`rate.calls_per_minute`):
    /// every tool call does, and so does a runbook's start, which reads the
    /// store and writes a line before any of its calls.
    pub fn take_token(&self, identity: &str) -> Result<(), CallError> {
        let per_minute = self.calls_per_minute;
        if per_minute == 0 {
            return Ok(());
        }
        match self.state.rate.take(identity, per_minute, self.now_ms()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(CallError::RateLimited {
                identity: identity.to_string(),
                limit: per_minute,
            }),
            Err(e) => Err(CallError::RateUnavailable(told(&e))),
        }
    }
}
