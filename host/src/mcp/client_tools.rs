//! The tool host of one `execute` from an MCP client: every call goes
//! through the gateway as the session's identity; a call that needs
//! approval is put to the person in the client (when the client can ask,
//! and the configuration lets this identity and tier be approved there:
//! `Gateway::may_approve_in_client`) and, on accept, approved and run in
//! the same execution; otherwise the agent gets the operator's command.
//! Each finished call is reported as progress and to the session log,
//! naming the tool as the gateway quotes names (cut, visible).
//!
//! Against approval fatigue, the person is asked one call at a time per
//! execution, and not again in that execution after they declined one or
//! were asked [`MAX_PROMPTS`] times: later calls get the operator's
//! command, saying so. The arguments of a call that may be asked about
//! are handed back by the gateway with its `ApprovalRequired`, not copied
//! for every call.

use std::sync::{
    atomic::{AtomicU32, Ordering},
    Arc,
};

use airlock_gateway::{
    catalog::quote_name, visible::visible, CallError, Called, Caller, Gateway, Refused,
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

use super::logging::{Level, SessionLog};

/// What the person answers.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Approval {
    /// Approve this one call.
    pub approve: bool,
}

rmcp::elicit_safe!(Approval);

/// The most approval prompts one execution puts to the person in the
/// client; after them (or after one decline) its calls wait for an
/// operator.
pub const MAX_PROMPTS: u32 = 5;

/// The prompts of one execution, taken one at a time.
#[derive(Default)]
pub struct Asking(tokio::sync::Mutex<Prompts>);

#[derive(Default)]
struct Prompts {
    asked: u32,
    declined: bool,
}

impl Prompts {
    /// Why the person is not asked again in this execution, if they are not.
    fn done_asking(&self) -> Option<String> {
        if self.declined {
            Some("the person declined a call of this execution".into())
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
}

fn failure(e: &CallError) -> ToolFailure {
    ToolFailure::new(e.code(), e.to_string()).with_details(e.details())
}

impl ClientTools {
    /// Asks the person in the client; `Ok(true)` when they approve.
    async fn ask(
        &self,
        peer: &Peer<RoleServer>,
        tool: &str,
        summary: &str,
    ) -> Result<bool, String> {
        // The summary is escaped already; a request filed by an older
        // version may not be, and escaping again changes nothing.
        let message = format!(
            "Airlock: identity {} wants to run {tool}({}). Approve this one call?",
            visible(&self.caller.identity),
            visible(summary)
        );
        super::question::ask(peer, message)
            .await
            .map(|a| a == super::question::Answer::Approved)
    }

    async fn report(&self, name: &str, outcome: Result<(), &CallError>) {
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
        let code = outcome.err().map(CallError::code).unwrap_or("ok");
        // Refusals by Airlock's own controls and state it cannot reach are
        // for whoever watches the session even when the script recovers;
        // an agent's own mistakes and the backend's answers reach the
        // script, which decides.
        let level = match code {
            "ok" => Level::Debug,
            "policy_denied"
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
        let ToolCall { name, args, note } = call;
        let result = match self
            .gateway
            .call_keeping_args(&self.caller, &name, args)
            .await
        {
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
                && self
                    .gateway
                    .may_approve_in_client(&self.caller.identity, &tool) =>
            {
                // Filed: should the execution end while this call waits
                // for the person (behind another prompt, say), the trace
                // still says its request is open.
                note.status(airlock_sandbox::codes::APPROVAL_REQUIRED);
                let (result, held) = self
                    .approve_in_client(&name, args, &note, tool, request_id, summary, how)
                    .await;
                // A decline keeps the prompt lock until its own result is
                // out, so the calls waiting behind it (which will not be
                // asked) cannot settle first: the decline is what a
                // `Promise.all` over them reports.
                self.report(&name, result.as_ref().map(|_| ())).await;
                drop(held);
                return result.map(|c| c.value).map_err(|e| failure(&e));
            }
            Err(refused) => Err(refused.error),
        };
        self.report(&name, result.as_ref().map(|_| ())).await;
        result.map(|c| c.value).map_err(|e| failure(&e))
    }

    fn principal(&self) -> Option<&str> {
        Some(&self.caller.identity)
    }
}

impl ClientTools {
    /// Puts a call that needs approval to the person in the client (one
    /// prompt at a time in this execution, none after a decline or
    /// `MAX_PROMPTS`) and runs it again with `args` if they approve. After
    /// a decline it hands back the prompt lock, for the caller to release
    /// once the decline is reported.
    #[allow(clippy::too_many_arguments)] // the refusal's parts, taken apart once
    async fn approve_in_client(
        &self,
        name: &str,
        args: Value,
        note: &CallNote,
        tool: String,
        request_id: String,
        summary: String,
        how: String,
    ) -> (
        Result<Called, CallError>,
        Option<tokio::sync::MutexGuard<'_, Prompts>>,
    ) {
        let mut prompts = self.asking.0.lock().await;
        if let Some(why) = prompts.done_asking() {
            return (Err(CallError::ApprovalRequired {
                how: format!("{how}. The person in the MCP client is not asked again in this execution ({why})"),
                tool,
                request_id,
                summary,
            }), None);
        }
        prompts.asked += 1;
        let asked = json!({"message": format!("asking the person in the client to approve {tool} ({request_id})"), "request_id": request_id, "tool": tool});
        self.log.send(&self.peer, Level::Notice, asked).await;
        match self.ask(&self.peer, &tool, &summary).await {
            Ok(true) => {
                drop(prompts);
                // Approved: no longer waiting for anyone. Should the
                // execution end while it runs, it was cut short.
                note.status(airlock_sandbox::codes::CANCELLED);
                let by = format!("{} (in the MCP client)", self.caller.identity);
                let result =
                    match self
                        .gateway
                        .approvals()
                        .approve(&request_id, &by, self.gateway.now_ms())
                    {
                        Ok(_) => self.gateway.call(&self.caller, name, args).await,
                        Err(e) => Err(CallError::ApprovalUnavailable(e.to_string())),
                    };
                (result, None)
            }
            Ok(false) => {
                prompts.declined = true;
                note.status(airlock_sandbox::codes::POLICY_DENIED);
                let _ = self.gateway.approvals().deny(
                    &request_id,
                    "the person in the MCP client",
                    self.gateway.now_ms(),
                );
                (Err(CallError::PolicyDenied {
                    tool,
                    reason: format!("the person in the client declined (request {request_id}); the client is not asked again in this execution"),
                }), Some(prompts))
            }
            // The client could not ask after all: leave the request for an
            // operator.
            Err(_) => (
                Err(CallError::ApprovalRequired {
                    how,
                    tool,
                    request_id,
                    summary,
                }),
                None,
            ),
        }
    }
}

/// Puts a filed plan to the person in the client, when the client can ask
/// and every change needing approval may be approved there
/// (`Gateway::may_approve_in_client`); records their answer on the plan
/// and in the audit. Otherwise the plan waits for an operator.
pub async fn decide_plan(
    gateway: &Gateway,
    identity: &str,
    peer: &Peer<RoleServer>,
    can_ask: bool,
    report: &mut crate::plans::Report,
) {
    let Some(changes) = report.waiting() else {
        return;
    };
    let askable = changes
        .iter()
        .filter(|c| c.needs_approval)
        .all(|c| gateway.may_approve_in_client(identity, &c.tool));
    if !can_ask || !askable {
        return;
    }
    let id = report.id().to_string();
    let message = format!(
        "Airlock: identity {} plans these changes (plan {id}):\n{}Approve the whole plan? Each change then runs once, when the same script is run with this plan.",
        visible(identity),
        crate::plans::table(changes)
    );
    let answer = match super::question::ask(peer, message).await {
        Ok(a) => a,
        // The client could not ask after all: an operator decides.
        Err(_) => return,
    };
    let now = gateway.now_ms();
    let decided = if answer == super::question::Answer::Approved {
        let by = format!("{identity} (in the MCP client)");
        gateway.approvals().approve(&id, &by, now)
    } else {
        gateway
            .approvals()
            .deny(&id, "the person in the MCP client", now)
    };
    match decided {
        Ok(request) => {
            if let Err(e) = gateway.plan_decided(&request) {
                tracing::warn!(plan = %id, error = %e, "could not record a plan's decision in the audit log");
            }
            if let crate::plans::Report::Recorded { decided, .. } = report {
                *decided = Some(request.status);
            }
        }
        Err(e) => {
            tracing::warn!(plan = %id, error = %e, "could not record the client's decision on a plan")
        }
    }
}
