//! A decision, made and recorded: [`decide`] moves a request in its store
//! (which keeps the four-eyes rule, [`crate::approval::refusal`]) and
//! writes the decision to the audit chain with the approver, the channel
//! and whether the approver was the requester ([`record`]).

pub use crate::approval::{Channel, Decider};

use serde_json::{Map, Value};

use crate::{
    approval::{ApprovalError, ApprovalStore, Request, Status},
    audit::{AuditError, AuditStore},
    audit_fields,
};

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
    if let Some(reason) = &request.reason {
        line.insert("reason".into(), audit_fields::reason(reason));
    }
    let hash = if request.changes.is_some() {
        "changes_sha256"
    } else {
        "args_sha256"
    };
    line.insert(hash.into(), Value::String(request.args_hash.clone()));
    audit.append(event, line).map(|_| ())
}
