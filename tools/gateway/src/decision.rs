//! Who decides an approval request, through which channel, and the rule
//! every channel keeps: **four eyes**. The identity whose call or plan
//! asks cannot approve it — not in its own MCP client, not on the command
//! line, not in a console — unless the operator allowed that identity
//! (or its identity provider's issuer or group) to approve its own
//! requests (`approve_own`). Refusing one's own request is always
//! allowed: it cannot make anything happen.
//!
//! The rule is kept where the decision is written (every store's
//! [`ApprovalStore::decide`] asks [`refusal`]), so no channel can forget
//! it. Each decision is written to the audit chain with the approver, the
//! channel and whether the approver was the requester ([`record`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    approval::{ApprovalError, ApprovalStore, Request, Status},
    audit::{AuditError, AuditStore},
    audit_fields,
};

/// Where a decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// `airlock approvals approve|deny` in a shell with the state.
    Cli,
    /// The person in the requester's own MCP client (elicitation).
    Client,
    /// The operator console in a browser.
    Console,
    /// `airlock demo`, approving its own plan to show the flow.
    Demo,
    /// Airlock itself: only ever a denial (a plan whose audit line could
    /// not be written is made undecidable).
    Airlock,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Cli => "cli",
            Channel::Client => "client",
            Channel::Console => "console",
            Channel::Demo => "demo",
            Channel::Airlock => "airlock",
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who decides, and through which channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decider {
    /// The approver's name as the channel knows it: the identity in a
    /// client or console, `--by` (default the login name) on the command
    /// line.
    pub who: String,
    pub channel: Channel,
    /// The operator allowed the requester to approve its own requests
    /// (`approve_own`): only then may `who` approve a request `who` asked.
    pub may_approve_own: bool,
}

impl Decider {
    /// An operator on the command line (or in a test).
    pub fn cli(who: impl Into<String>) -> Self {
        Self {
            who: who.into(),
            channel: Channel::Cli,
            may_approve_own: false,
        }
    }

    /// The person in an identity's own MCP client: always the requester.
    pub fn client(identity: impl Into<String>, may_approve_own: bool) -> Self {
        Self {
            who: identity.into(),
            channel: Channel::Client,
            may_approve_own,
        }
    }

    /// `who` may approve its own requests (the operator allowed it).
    pub fn allowing_own(mut self, allowed: bool) -> Self {
        self.may_approve_own = allowed;
        self
    }
}

/// Why `decider` may not move `current` to `to`, if it may not: a person
/// approving a request they asked themselves, without `approve_own`.
pub(crate) fn refusal(current: &Request, decider: &Decider, to: Status) -> Option<ApprovalError> {
    (to == Status::Approved && decider.who == current.identity && !decider.may_approve_own).then(
        || ApprovalError::OwnRequest {
            id: current.id.clone(),
            identity: current.identity.clone(),
        },
    )
}

/// Decides request `id` and writes the decision to the audit chain. A
/// decision that could not be written is still made (the store holds it);
/// the error says so, and the call it allows still carries the approver
/// on its own line.
pub fn decide(
    approvals: &dyn ApprovalStore,
    audit: &dyn AuditStore,
    id: &str,
    decider: &Decider,
    now_ms: i64,
    to: Status,
) -> Result<Request, ApprovalError> {
    let r = approvals.decide(id, decider, now_ms, to)?;
    record(audit, &r).map_err(|e| {
        ApprovalError::Storage(format!(
            "decided, but the decision could not be written to the audit log: {e}"
        ))
    })?;
    Ok(r)
}

/// Writes a decision to the audit chain: `plan_decision` for a plan (with
/// the hash of the list decided on), `approval_decision` for one call
/// (its tool and argument hash); both with who decided, the channel, and
/// `own` when the approver was the requester.
pub fn record(audit: &dyn AuditStore, request: &Request) -> Result<(), AuditError> {
    let mut line = Map::new();
    let event = if request.changes.is_some() {
        line.insert("plan".into(), Value::String(request.id.clone()));
        "plan_decision"
    } else {
        line.insert("approval".into(), Value::String(request.id.clone()));
        line.insert("tool".into(), audit_fields::tool(&request.tool));
        "approval_decision"
    };
    line.insert("identity".into(), Value::String(request.identity.clone()));
    line.insert(
        "status".into(),
        Value::String(request.status.as_str().into()),
    );
    if let Some(by) = &request.decided_by {
        line.insert("decided_by".into(), audit_fields::decider(by));
    }
    if let Some(via) = &request.decided_via {
        line.insert("channel".into(), audit_fields::code(via));
    }
    line.insert("own".into(), Value::Bool(request.decided_by_requester()));
    let hash = if request.changes.is_some() {
        "changes_sha256"
    } else {
        "args_sha256"
    };
    line.insert(hash.into(), Value::String(request.args_hash.clone()));
    audit.append(event, line).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(identity: &str) -> Request {
        Request {
            id: "ap-1".into(),
            identity: identity.into(),
            tool: "vm_stop".into(),
            tool_key: None,
            args_hash: "h".into(),
            summary: String::new(),
            detail: None,
            status: Status::Pending,
            created_ms: 0,
            expires_ms: 1,
            decided_by: None,
            decided_via: None,
            changes: None,
        }
    }

    #[test]
    fn nobody_approves_their_own_request_unless_allowed() {
        let r = request("olga");
        let approve = Status::Approved;
        assert!(refusal(&r, &Decider::client("olga", false), approve).is_some());
        assert!(refusal(&r, &Decider::cli("olga"), approve).is_some());
        assert!(refusal(&r, &Decider::client("olga", true), approve).is_none());
        assert!(refusal(&r, &Decider::cli("rita"), approve).is_none());
        assert!(
            refusal(&r, &Decider::client("olga", false), Status::Denied).is_none(),
            "refusing one's own request is always allowed"
        );
        let e = refusal(&r, &Decider::cli("olga"), approve).unwrap();
        assert!(e.to_string().contains("approve_own"), "{e}");
    }
}
