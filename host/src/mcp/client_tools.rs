//! The tool host of one `execute` from an MCP client: every call goes
//! through the gateway as the session's identity; a call that needs
//! approval is put to the person in the client (when the client can ask,
//! and the configuration lets this identity and tier be approved there:
//! `Gateway::may_approve_in_client`) and, on accept, approved and run in
//! the same execution; otherwise the agent gets the operator's command.
//! Each finished call is reported as progress and to the session log,
//! naming the tool as the gateway quotes names (cut, visible).

use std::sync::{
    atomic::{AtomicU32, Ordering},
    Arc,
};

use airlock_sandbox::{ToolCall, ToolFailure, ToolHost};
use airlock_tools::{catalog::quote_name, visible::visible, CallError, Caller, Gateway};
use async_trait::async_trait;
use rmcp::{
    model::{ProgressNotificationParam, ProgressToken},
    service::{ElicitationError, Peer},
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
        match peer.elicit::<Approval>(message).await {
            Ok(Some(a)) => Ok(a.approve),
            Ok(None)
            | Err(ElicitationError::UserDeclined)
            | Err(ElicitationError::UserCancelled) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
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
        let level = match code {
            "ok" => Level::Debug,
            "policy_denied" => Level::Warning,
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
        let first = self
            .gateway
            .call(&self.caller, &call.name, call.args.clone())
            .await;
        let result = match first {
            Err(CallError::ApprovalRequired {
                tool,
                request_id,
                summary,
                ..
            }) if self.can_ask
                && self
                    .gateway
                    .may_approve_in_client(&self.caller.identity, &tool) =>
            {
                let asked = json!({"message": format!("asking the person in the client to approve {tool} ({request_id})"), "request_id": request_id, "tool": tool});
                self.log.send(&self.peer, Level::Notice, asked).await;
                match self.ask(&self.peer, &tool, &summary).await {
                    Ok(true) => {
                        let by = format!("{} (in the MCP client)", self.caller.identity);
                        match self.gateway.approvals().approve(
                            &request_id,
                            &by,
                            self.gateway.now_ms(),
                        ) {
                            Ok(_) => self.gateway.call(&self.caller, &call.name, call.args).await,
                            Err(e) => Err(CallError::ApprovalUnavailable(e.to_string())),
                        }
                    }
                    Ok(false) => {
                        let _ = self.gateway.approvals().deny(
                            &request_id,
                            "the person in the MCP client",
                            self.gateway.now_ms(),
                        );
                        Err(CallError::PolicyDenied {
                            tool,
                            reason: format!(
                                "the person in the client declined (request {request_id})"
                            ),
                        })
                    }
                    // The client could not ask after all: leave the request
                    // for an operator.
                    Err(_) => Err(CallError::ApprovalRequired {
                        how: self.gateway.approve_instruction(&request_id),
                        tool,
                        request_id,
                        summary,
                    }),
                }
            }
            other => other,
        };
        self.report(&call.name, result.as_ref().map(|_| ())).await;
        result.map(|c| c.value).map_err(|e| failure(&e))
    }

    fn principal(&self) -> Option<&str> {
        Some(&self.caller.identity)
    }
}
