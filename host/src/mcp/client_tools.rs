//! The tool host of one `execute` from an MCP client: every call goes
//! through the gateway as the session's identity. A call that needs
//! approval is put to the person in the client when the client can ask
//! and the configuration lets this identity and tier be asked there
//! (`Gateway::may_approve_in_client`):
//!
//! - If the identity may approve its own requests (`approve_own`, off by
//!   default), the person is asked yes or no and, on yes, the call is
//!   approved and runs in the same execution.
//! - Otherwise (four eyes) the person is never offered a yes that
//!   decides: they are shown the request id and that someone else must
//!   approve it, and may leave it for an operator or withdraw it. An
//!   agent's client that accepts every form can therefore not approve
//!   its own calls.
//!
//! Each finished call is reported as progress and to the session log,
//! naming the tool as the gateway quotes names (cut, visible).
//!
//! Against approval fatigue, the person is asked one call at a time per
//! execution, and not again in that execution after they declined one,
//! were told once that an operator must decide, or were asked
//! [`MAX_PROMPTS`] times: later calls get the operator's command, saying
//! so. The arguments of a call that may be asked about are handed back by
//! the gateway with its `ApprovalRequired`, not copied for every call.

use std::sync::{
    atomic::{AtomicU32, Ordering},
    Arc,
};

use crate::wiring::Runbooks as _;
use airlock_catalog::{catalog::quote_name, visible::visible};
use airlock_gateway::{
    approval::Status, decision::Decider, CallError, Called, Caller, Gateway, Refused,
};
use airlock_sandbox::{CallNote, ToolCall, ToolFailure, ToolHost};
use async_trait::async_trait;
use rmcp::{
    model::{ProgressNotificationParam, ProgressToken},
    service::Peer,
    RoleServer,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    logging::{Level, SessionLog},
    question::Answer,
};

/// What the person answers when they may approve their own request.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Approval {
    /// Approve this one call.
    pub approve: bool,
}

rmcp::elicit_safe!(Approval);

/// What the person answers when someone else must approve: no answer
/// here makes anything run.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Referral {
    /// Leave the request for an operator to decide (false withdraws it).
    pub ask_an_operator: bool,
}

rmcp::elicit_safe!(Referral);

/// The most approval prompts one execution puts to the person in the
/// client; after them (or after one decline) its calls wait for an
/// operator.
pub const MAX_PROMPTS: u32 = 5;

/// The longest arguments (in full) the person in the client is asked to
/// approve; longer ones wait for an operator, who reads them with
/// `airlock approvals show`.
pub const MAX_PROMPT_DETAIL_BYTES: usize = 16 * 1024;

/// The prompts of one execution, taken one at a time.
#[derive(Default)]
pub struct Asking(tokio::sync::Mutex<Prompts>);

impl Asking {
    /// The prompts of an execution going on after a wait: a person who
    /// declined or dismissed a question of it before is not asked again.
    pub fn after(prompts: crate::durable::Prompts) -> Self {
        Self(tokio::sync::Mutex::new(Prompts {
            asked: prompts.asked,
            declined: prompts.declined,
            ..Prompts::default()
        }))
    }

    /// What the execution's row keeps of its questions when it waits:
    /// how many were put, and whether the person declined or dismissed
    /// one. A question still open then counts as dismissed (fail
    /// towards not asking again).
    pub fn kept(&self) -> crate::durable::Prompts {
        match self.0.try_lock() {
            Ok(p) => crate::durable::Prompts {
                asked: p.asked,
                declined: p.declined || p.dismissed,
            },
            Err(_) => crate::durable::Prompts {
                asked: MAX_PROMPTS,
                declined: true,
            },
        }
    }
}

#[derive(Default)]
struct Prompts {
    asked: u32,
    declined: bool,
    /// The person dismissed a question without a choice.
    dismissed: bool,
    /// The person was told once that an operator must decide.
    referred: bool,
}

impl Prompts {
    /// Why the person is not asked again in this execution, if they are not.
    fn done_asking(&self) -> Option<String> {
        if self.declined {
            Some("the person declined a call of this execution".into())
        } else if self.dismissed {
            Some("the person dismissed a question of this execution without a choice".into())
        } else if self.referred {
            Some(
                "the person was told once that someone else must approve this execution's calls"
                    .into(),
            )
        } else if self.asked >= MAX_PROMPTS {
            Some(format!(
                "the person was asked {MAX_PROMPTS} times in this execution"
            ))
        } else {
            None
        }
    }
}

pub struct ClientTools {
    pub gateway: Arc<Gateway>,
    pub caller: Caller,
    pub peer: Peer<RoleServer>,
    /// The client declared it can ask its user (elicitation).
    pub can_ask: bool,
    /// Set when the client asked for progress on this execute.
    pub progress: Option<ProgressToken>,
    pub log: SessionLog,
    pub done: AtomicU32,
    /// This execution's approval prompts: one at a time, a few at most.
    pub asking: Asking,
    /// Runs the runbooks the script calls.
    pub runbooks: Arc<crate::runbooks::Runner>,
    /// The execution is durable: a call that needs another person's
    /// decision waits (the execution parks) instead of failing.
    pub durable: bool,
    /// Set when the execution was taken from a process that died resuming
    /// it: the calls it waited for (call id → approval request), which
    /// that process may have sent. What it did after them is not known.
    pub orphaned: Option<std::collections::HashMap<u32, String>>,
    /// For a durable execution, `answer_within_ms`: counted from this
    /// run's first call to the host (after its slot and its replay), a
    /// read still running then, and any call made after, waits for the
    /// execution to be followed instead.
    pub answer_within: Option<std::time::Duration>,
    pub answer_by: std::sync::OnceLock<tokio::time::Instant>,
    /// A durable execution's write-ahead records: each change is written
    /// down before it is sent and once it is answered.
    pub checkpoints: Option<Arc<crate::checkpoints::Checkpoints>>,
    /// Cancelled when the server stops: a durable execution's answer is
    /// due at once.
    pub stopping: tokio_util::sync::CancellationToken,
}

/// The code a call gets when Airlock cannot tell whether a process that
/// died sent it, and will not send it again blindly.
pub const OUTCOME_UNKNOWN: &str = "outcome_unknown";

impl ClientTools {
    /// A call's failure as the script (or, for a durable execution's call
    /// waiting for a decision, the sandbox) gets it.
    fn failure(&self, e: &CallError) -> ToolFailure {
        crate::wiring::call_failure(&self.gateway, e, self.durable)
    }
}

impl ClientTools {
    /// In an execution taken from a process that died resuming it, what
    /// that process may have sent is not sent again blindly: a change
    /// fails `outcome_unknown` — except a call the execution waited for
    /// whose approval is still approved and unused, which was never sent
    /// (a request that cannot be read counts as used: fail closed). Reads
    /// go again; reading twice changes nothing.
    fn unknown_outcome(&self, name: &str, resumed: bool, call: Option<u32>) -> Option<ToolFailure> {
        let tool = quote_name(name);
        if let (Some(checkpoints), Some(id), true) = (&self.checkpoints, call, resumed) {
            if checkpoints.unanswered(id) {
                return Some(
                    ToolFailure::new(
                        OUTCOME_UNKNOWN,
                        format!(
                            "{tool} was sent (or about to be) by the Airlock process that ran this execution when it stopped, and no answer was recorded: it is not sent again blindly. Read the target's state to see whether the change happened, then go on from there"
                        ),
                    )
                    .with_details(json!({"tool": name})),
                );
            }
        }
        let waited = self.orphaned.as_ref()?;
        if let Some(request) = call.filter(|_| resumed).and_then(|c| waited.get(&c)) {
            let used = match self.gateway.approvals().get(request) {
                Ok(r) => r.status != airlock_gateway::approval::Status::Approved,
                Err(_) => true,
            };
            return used.then(|| {
                ToolFailure::new(
                    OUTCOME_UNKNOWN,
                    format!(
                        "{tool} may have been sent by the Airlock process that was resuming this execution when it stopped (its approval {request} is no longer unused), and it is not sent again blindly: read the target's state to see whether the change happened, then go on from there"
                    ),
                )
                .with_details(json!({"request_id": request, "tool": name}))
            });
        }
        (!self.is_read(name, false)).then(|| {
            ToolFailure::new(
                OUTCOME_UNKNOWN,
                format!(
                    "{tool} is a change, and the Airlock process that was resuming this execution stopped before it ended: which of its changes after its last wait went out is not known, so none is sent again blindly. Read the target's state, then run what is left as a new execution"
                ),
            )
            .with_details(json!({"tool": name}))
        })
    }

    /// Whether `name` is a read (sent twice, it changes nothing); a tool
    /// the catalog does not know counts as `unknown` says (the gateway
    /// refuses it anyway). Runbooks make changes.
    fn is_read(&self, name: &str, unknown: bool) -> bool {
        crate::wiring::runbook_name(name).is_none()
            && self.gateway.catalog().get(name).map_or(unknown, |e| {
                e.spec.tier == airlock_catalog::spec::Tier::Read
            })
    }

    /// The answer of a call that waits for the execution to be followed:
    /// its `execute` had to answer first. Nothing of it was sent, or it
    /// was a read, which is made again on the follow-up.
    fn later(&self, name: &str) -> ToolFailure {
        let tool = quote_name(name);
        let (why, how) = match self.stopping.is_cancelled() {
            true => (
                "this server is stopping",
                "this server is stopping: follow the execution on another server, or on this one once it is back; it goes on from here (a read still running is made again; nothing else was sent)",
            ),
            false => (
                "this execute's answer was due (answer_within_ms)",
                "follow the execution: it goes on from here (a read still running is made again; nothing else was sent)",
            ),
        };
        ToolFailure::new(
            airlock_sandbox::codes::WAITING,
            format!("{tool} goes on when the execution is followed: {why}"),
        )
        .with_details(json!({"later": true, "how": how}))
    }

    /// Asks the person in the client whether to approve their own call.
    async fn ask(
        &self,
        peer: &Peer<RoleServer>,
        tool: &str,
        summary: &str,
    ) -> Result<Answer<Approval>, String> {
        // The summary is escaped already; a request filed by an older
        // version may not be, and escaping again changes nothing.
        let message = format!(
            "Airlock: identity {} wants to run {tool}({}). Approve this one call?",
            visible(&self.caller.identity),
            visible(summary)
        );
        super::question::ask::<Approval>(peer, message).await
    }
    async fn report(&self, name: &str, outcome: Result<(), &CallError>) {
        self.report_code(name, outcome.err().map(CallError::code).unwrap_or("ok"))
            .await
    }

    /// Tells the client a call is done, `code` its status.
    async fn report_code(&self, name: &str, code: &str) {
        let tool = &quote_name(name);
        let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(token) = &self.progress {
            let mut p = ProgressNotificationParam::new(token.clone(), n as f64);
            p.message = Some(format!(
                "{n} tool call{} done (last: {tool})",
                if n == 1 { "" } else { "s" }
            ));
            let _ = self.peer.notify_progress(p).await;
        }
        // Refusals by Airlock's own controls and state it cannot reach are
        // for whoever watches the session even when the script recovers;
        // an agent's own mistakes and the backend's answers reach the
        // script, which decides.
        let level = match code {
            "ok" => Level::Debug,
            "policy_denied"
            | "approval_denied"
            | "rate_limited"
            | "approval_limit"
            | "approval_too_large"
            | "audit_unavailable"
            | "approval_unavailable"
            | "rate_unavailable" => Level::Warning,
            "approval_required" => Level::Notice,
            _ => Level::Info,
        };
        let data = json!({
            "message": format!("tools.{tool} → {code}"),
            "execution": self.caller.execution,
            "identity": self.caller.identity,
            "tool": tool,
            "status": code,
        });
        self.log.send(&self.peer, level, data).await;
    }
}

#[async_trait]
impl ToolHost for ClientTools {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        let ToolCall {
            name,
            args,
            note,
            resumed,
            journal,
        } = call;
        self.runbooks.over_calls(&note)?;
        let id = note.call_id();
        // An earlier run had its answer: handed over, not sent again.
        if let (Some(checkpoints), Some(id), true) = (&self.checkpoints, id, resumed) {
            if let Some(kept) = checkpoints.kept_answer(id) {
                let code = kept.as_ref().map_or_else(|f| f.code.as_str(), |_| "ok");
                self.report_code(&name, code).await;
                return kept;
            }
        }
        if let Some(unknown) = self.unknown_outcome(&name, resumed, id) {
            self.report_code(&name, OUTCOME_UNKNOWN).await;
            return Err(unknown);
        }
        let answer_by = self.answer_within.map(|within| {
            *self
                .answer_by
                .get_or_init(|| tokio::time::Instant::now() + within)
        });
        let due = answer_by.is_some_and(|by| tokio::time::Instant::now() >= by)
            || (self.durable && self.stopping.is_cancelled());
        if due {
            self.report_code(&name, airlock_sandbox::codes::WAITING)
                .await;
            return Err(self.later(&name));
        }
        // A change of a journaled execution is written down before it is
        // sent, and again with its answer.
        let recorded = match (&self.checkpoints, id) {
            (Some(checkpoints), Some(id)) if !self.is_read(&name, false) => {
                if let Err(refused) = checkpoints.before_send(id, &journal, &name) {
                    self.report_code(&name, &refused.code).await;
                    return Err(refused);
                }
                Some((checkpoints, id))
            }
            _ => None,
        };
        let result = self.send(name, args, note, resumed, answer_by).await;
        if let Some((checkpoints, id)) = recorded {
            checkpoints.after(id, &journal, &result);
        }
        result
    }

    fn principal(&self) -> Option<&str> {
        Some(&self.caller.identity)
    }
}

impl ClientTools {
    /// Sends one call on (a runbook, or the gateway), asking the person
    /// in the client where it may.
    async fn send(
        &self,
        name: String,
        args: Value,
        note: airlock_sandbox::CallNote,
        resumed: bool,
        answer_by: Option<tokio::time::Instant>,
    ) -> Result<Value, ToolFailure> {
        if let Some(runbook) = crate::wiring::runbook_name(&name) {
            let result = self
                .runbooks
                .run(&self.gateway, &self.caller, runbook, args, &note)
                .await;
            let code = result.as_ref().map_or_else(|f| f.code.as_str(), |_| "ok");
            self.report_code(&name, code).await;
            return result;
        }
        let caller = Caller {
            script_call: note.call_id(),
            ..self.caller.clone()
        };
        let called = self.gateway.call_keeping_args(&caller, &name, args);
        // A read still running when the answer is due is dropped, and
        // made again when the execution goes on (a `wait_task` on a long
        // task, until the task ends; `MAX_IDLE_PARKS` bounds a read that
        // never does); a change is waited for.
        let called = match answer_by.filter(|_| self.is_read(&name, false)) {
            Some(by) => {
                let raced = tokio::select! {
                    r = called => Some(r),
                    _ = tokio::time::sleep_until(by) => None,
                    _ = self.stopping.cancelled() => None,
                };
                match raced {
                    Some(r) => r,
                    None => {
                        self.report_code(&name, airlock_sandbox::codes::WAITING)
                            .await;
                        return Err(self.later(&name));
                    }
                }
            }
            None => called.await,
        };
        let result = match called {
            Ok(called) => Ok(called),
            Err(Refused {
                error:
                    CallError::ApprovalRequired {
                        tool,
                        request_id,
                        summary,
                        how,
                    },
                args: Some(args),
            }) if self.can_ask
                // A call sent again after its execution waited was put to
                // the person when it first asked.
                && !resumed
                && self
                    .gateway
                    .may_approve_in_client(&self.caller.identity, &tool) =>
            {
                // Filed: should the execution end while this call waits
                // for the person (behind another prompt, say), the trace
                // still says its request is open.
                note.status(airlock_sandbox::codes::APPROVAL_REQUIRED);
                let asked = Asked {
                    tool,
                    request_id,
                    summary,
                    how,
                };
                let (result, held) = if self.gateway.may_approve_own(&self.caller) {
                    self.approve_in_client(&name, args, &note, asked).await
                } else {
                    (self.refer_to_operator(&note, asked).await, None)
                };
                // A decline keeps the prompt lock until its own result is
                // out, so the calls waiting behind it (which will not be
                // asked) cannot settle first: the decline is what a
                // `Promise.all` over them reports.
                self.report(&name, result.as_ref().map(|_| ())).await;
                drop(held);
                return result.map(|c| c.value).map_err(|e| self.failure(&e));
            }
            Err(refused) => Err(refused.error),
        };
        self.report(&name, result.as_ref().map(|_| ())).await;
        result.map(|c| c.value).map_err(|e| self.failure(&e))
    }
}

/// An `ApprovalRequired`, taken apart.
struct Asked {
    tool: String,
    request_id: String,
    summary: String,
    how: String,
}

impl Asked {
    fn required(self, how: String) -> CallError {
        CallError::ApprovalRequired {
            how,
            tool: self.tool,
            request_id: self.request_id,
            summary: self.summary,
        }
    }
}

impl ClientTools {
    /// Puts a call that needs approval to the person in the client, who
    /// may approve their own requests (one prompt at a time in this
    /// execution, none after a decline or `MAX_PROMPTS`), and runs it
    /// again with `args` if they approve. After a decline it hands back
    /// the prompt lock, for the caller to release once the decline is
    /// reported.
    async fn approve_in_client(
        &self,
        name: &str,
        args: Value,
        note: &CallNote,
        asked: Asked,
    ) -> (
        Result<Called, CallError>,
        Option<tokio::sync::MutexGuard<'_, Prompts>>,
    ) {
        let mut prompts = self.asking.0.lock().await;
        if let Some(why) = prompts.done_asking() {
            let how = format!(
                "{}. The person in the MCP client is not asked again in this execution ({why})",
                asked.how
            );
            return (Err(asked.required(how)), None);
        }
        let id = &asked.request_id;
        // The person approves what they read: the arguments in full when
        // the list form summarised a long value (and they fit a prompt).
        let shown = match self.gateway.approvals().get(id).map(|r| r.detail) {
            Ok(Some(full)) if full.len() <= MAX_PROMPT_DETAIL_BYTES => full,
            Ok(Some(_)) => {
                let how = format!("{}. Its arguments are too long to read in the client: `airlock approvals show {id}` shows them to an operator", asked.how);
                return (Err(asked.required(how)), None);
            }
            _ => asked.summary.clone(),
        };
        prompts.asked += 1;
        let told = json!({"message": format!("asking the person in the client to approve {} ({id})", asked.tool), "request_id": id, "tool": asked.tool});
        self.log.send(&self.peer, Level::Notice, told).await;
        let decider = Decider::client(&self.caller.identity, true);
        match self.ask(&self.peer, &asked.tool, &shown).await {
            Ok(Answer::Accepted(Approval { approve: true })) => {
                drop(prompts);
                // Approved: no longer waiting for anyone. Should the
                // execution end while it runs, it was cut short.
                note.status(airlock_sandbox::codes::CANCELLED);
                let result = match self.gateway.decide(id, &decider, Status::Approved) {
                    Ok(_) => {
                        let caller = Caller {
                            script_call: note.call_id(),
                            ..self.caller.clone()
                        };
                        self.gateway.call(&caller, name, args).await
                    }
                    Err(e) => Err(CallError::ApprovalUnavailable(e.to_string())),
                };
                (result, None)
            }
            // Dismissed without a choice: nothing is decided. The request
            // stays open for an operator (a durable execution waits for
            // the decision), and the person is not asked again here.
            Ok(Answer::Dismissed) => {
                prompts.dismissed = true;
                let how = format!(
                    "{}. The person in the MCP client dismissed the question without a choice, so nothing was decided and the request stays open for an operator; the client is not asked again in this execution",
                    asked.how
                );
                (Err(asked.required(how)), None)
            }
            Ok(Answer::Accepted(Approval { approve: false }) | Answer::Declined) => {
                prompts.declined = true;
                note.status(airlock_sandbox::codes::APPROVAL_DENIED);
                if let Err(e) = self.gateway.decide(id, &decider, Status::Denied) {
                    tracing::warn!(request = %id, error = %e, "could not record the client's decline");
                }
                (Err(CallError::ApprovalDenied {
                    reason: format!("the person in the client declined (request {id}); the client is not asked again in this execution"),
                    request_id: id.clone(),
                    tool: asked.tool,
                }), Some(prompts))
            }
            // The client could not ask after all: leave the request for an
            // operator.
            Err(_) => {
                let how = asked.how.clone();
                (Err(asked.required(how)), None)
            }
        }
    }

    /// Four eyes: tells the person in the client that someone else must
    /// approve this call, with its request id, once per execution. They
    /// may leave it for an operator (the call fails with
    /// `ApprovalRequired`, the request stays open) or withdraw it (denied,
    /// as the requester). Nothing they answer makes the call run.
    async fn refer_to_operator(&self, note: &CallNote, asked: Asked) -> Result<Called, CallError> {
        let who = visible(&self.caller.identity);
        let mut prompts = self.asking.0.lock().await;
        if let Some(why) = prompts.done_asking() {
            let how = format!(
                "{}. The person in the MCP client is not asked again in this execution ({why})",
                asked.how
            );
            return Err(asked.required(how));
        }
        prompts.asked += 1;
        prompts.referred = true;
        let id = &asked.request_id;
        let told = json!({"message": format!("telling the person in the client that {} ({id}) needs another person's approval", asked.tool), "request_id": id, "tool": asked.tool});
        self.log.send(&self.peer, Level::Notice, told).await;
        // A durable execution waits for the decision; another is run again.
        let how = match self.durable {
            true => self.gateway.wait_instruction(id, &asked.how),
            false => asked.how.clone(),
        };
        let message = format!(
            "Airlock: identity {who} wants to run {}({}). It needs the approval of someone other than {who}: request {id}. {how}. Leave it for an operator? (No withdraws the request.)",
            asked.tool,
            visible(&asked.summary),
        );
        let answer = super::question::ask::<Referral>(&self.peer, message).await;
        if let Ok(Answer::Accepted(Referral {
            ask_an_operator: false,
        })) = answer
        {
            note.status(airlock_sandbox::codes::APPROVAL_DENIED);
            let decider = Decider::client(&self.caller.identity, false);
            if let Err(e) = self.gateway.decide(id, &decider, Status::Denied) {
                tracing::warn!(request = %id, error = %e, "could not record a withdrawn request");
            }
            return Err(CallError::ApprovalDenied {
                reason: format!("the person in the client withdrew the request ({id})"),
                request_id: id.clone(),
                tool: asked.tool,
            });
        }
        let how = format!(
            "{}. Someone other than {who} must approve it (approve_own is off for {who}); the person in the MCP client was told",
            asked.how
        );
        Err(asked.required(how))
    }
}

/// Puts a filed plan to the person in the client, when the client can ask
/// and every change needing approval may be asked about there
/// (`Gateway::may_approve_in_client`): to approve or decline when the
/// identity may approve its own requests, else to learn that someone
/// else must approve it (leave it for an operator, or withdraw it).
/// Records their decision, if any, on the plan and in the audit.
pub async fn decide_plan(
    gateway: &Gateway,
    caller: &Caller,
    peer: &Peer<RoleServer>,
    can_ask: bool,
    report: &mut crate::plans::Report,
) {
    let Some(changes) = report.waiting() else {
        return;
    };
    let identity = caller.identity.as_str();
    let askable = changes
        .iter()
        .filter(|c| c.needs_approval)
        .all(|c| gateway.may_approve_in_client(identity, &c.tool));
    if !can_ask || !askable {
        return;
    }
    let id = report.id().to_string();
    let who = visible(identity);
    let own = gateway.may_approve_own(caller);
    // A person who may decide reads every argument in full; one who is
    // only told reads the list form.
    let table = if own {
        let full = crate::plans::full_table(changes);
        if full.len() > MAX_PROMPT_DETAIL_BYTES {
            tracing::info!(plan = %id, "a plan too long to read in the client waits for an operator (`airlock approvals show`)");
            return;
        }
        full
    } else {
        crate::plans::table(changes)
    };
    let decision = if own {
        let message = format!(
            "Airlock: identity {who} plans these changes (plan {id}):\n{table}Approve the whole plan? Each change then runs once, when the same script is run with this plan."
        );
        match super::question::ask::<Approval>(peer, message).await {
            Ok(Answer::Accepted(Approval { approve: true })) => Status::Approved,
            Ok(Answer::Accepted(Approval { approve: false }) | Answer::Declined) => Status::Denied,
            // Dismissed without a choice, or the client could not ask
            // after all: an operator decides.
            Ok(Answer::Dismissed) | Err(_) => return,
        }
    } else {
        let message = format!(
            "Airlock: identity {who} plans these changes (plan {id}):\n{table}The plan needs the approval of someone other than {who}: an operator runs `{}`. Leave it for an operator? (No withdraws the plan.)",
            gateway.approve_command_for(&id)
        );
        match super::question::ask::<Referral>(peer, message).await {
            Ok(Answer::Accepted(Referral {
                ask_an_operator: false,
            })) => Status::Denied,
            _ => return,
        }
    };
    let decider = Decider::client(identity, own);
    match gateway.decide(&id, &decider, decision) {
        Ok(request) => {
            if let crate::plans::Report::Recorded { decided, .. } = report {
                *decided = Some(request.status);
            }
        }
        Err(e) => {
            tracing::warn!(plan = %id, error = %e, "could not record the client's decision on a plan")
        }
    }
}
