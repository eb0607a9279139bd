//! Approvals asked the 2026-07-28 way. A stateless client cannot be sent
//! a question mid-request; instead, when an `execute` parks waiting for
//! calls the person in the client may approve (`approve_own`, the tier
//! askable there), the answer is an `InputRequiredResult`: one
//! elicitation per request, and a sealed `requestState` naming the
//! execution and the requests. The client asks its user and sends the
//! same `tools/call` again with the answers and the state; the answers
//! decide the requests (as the client channel, four eyes kept by the
//! store) and the execution goes on by replay.
//!
//! The state is sealed (HMAC, `rmcp`'s `RequestStateCodec`) with a key
//! derived from the deployment's approval secret, which replicas share and
//! nobody reads from public data, bound to the identity (associated data)
//! and to [`STATE_TTL`]. A state that is tampered with, another
//! identity's, expired, or names requests no longer pending in that
//! execution decides nothing.
//!
//! This first step keeps the parked execution in this process's memory:
//! the retry must reach the replica that parked it.

use std::time::Duration;

use airlock_gateway::{approval::Status, decision::Decider, visible::visible, Caller, Gateway};
use hmac::{Hmac, Mac};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequests, InputRequiredResult, InputResponses, ProtocolVersion, RequestStateCodec,
    SealOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use super::client_tools::Approval;

/// How long a sealed state may be answered: the approval requests it
/// names expire after 10 minutes by default.
pub const STATE_TTL: Duration = Duration::from_secs(10 * 60);

/// What the sealed state carries.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct State {
    pub execution: String,
    pub requests: Vec<String>,
}

/// Why an answered state decides nothing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("the requestState is not one this deployment sealed for this identity, or it has expired ({0}); nothing was decided. Follow the execution with execute({{\"execution\": ID}}) to be asked again")]
    Unsealed(String),
    #[error("the approval secret of this deployment cannot be read, so no requestState can be sealed or opened: {0}")]
    NoKey(String),
}

/// Whether this request speaks 2026-07-28 or later and its client can ask
/// its user with a form.
pub fn stateless_asker(
    version: Option<ProtocolVersion>,
    capabilities: Option<rmcp::model::ClientCapabilities>,
) -> bool {
    version.is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
        && capabilities.is_some_and(|c| c.elicitation.is_some())
}

fn codec(gateway: &Gateway) -> Result<RequestStateCodec, StateError> {
    let secret = gateway
        .approvals()
        .summary_key()
        .map_err(|e| StateError::NoKey(e.to_string()))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret).expect("HMAC takes any key");
    mac.update(b"airlock requestState v1");
    let key = mac.finalize().into_bytes();
    RequestStateCodec::try_new(key.to_vec()).map_err(|e| StateError::NoKey(e.to_string()))
}

/// The questions for the requests of `execution` the person in the client
/// may decide, with their sealed state; `None` when there are none (four
/// eyes: someone else decides, and the waiting answer says who).
pub fn ask(
    gateway: &Gateway,
    caller: &Caller,
    execution: &str,
    requests: &[String],
) -> Option<InputRequiredResult> {
    if !gateway.may_approve_own(caller) {
        return None;
    }
    let mut questions = InputRequests::new();
    let mut asked = Vec::new();
    for id in requests {
        let Ok(r) = gateway.approvals().get(id) else {
            continue;
        };
        if r.status != Status::Pending || !gateway.may_approve_in_client(&caller.identity, &r.tool)
        {
            continue;
        }
        let schema = ElicitationSchema::from_type::<Approval>().ok()?;
        let message = format!(
            "Airlock: identity {} wants to run {}({}). Approve this one call? (request {id})",
            visible(&caller.identity),
            visible(&r.tool),
            visible(&r.summary)
        );
        questions.insert(
            id.clone(),
            InputRequest::Elicitation(ElicitRequest::new(
                ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message,
                    requested_schema: schema,
                },
            )),
        );
        asked.push(id.clone());
    }
    if asked.is_empty() {
        return None;
    }
    let state = State {
        execution: execution.to_string(),
        requests: asked,
    };
    let sealed = codec(gateway)
        .ok()?
        .seal_json_with(
            &state,
            &SealOptions::new()
                .associated_data(caller.identity.as_bytes())
                .ttl(STATE_TTL),
        )
        .ok()?;
    Some(InputRequiredResult::new(Some(questions), Some(sealed)))
}

/// Opens a state the client sent back, for this identity.
pub fn open(gateway: &Gateway, identity: &str, sealed: &str) -> Result<State, StateError> {
    codec(gateway)?
        .open_json_with(sealed, identity.as_bytes())
        .map_err(|e| StateError::Unsealed(e.to_string()))
}

/// Decides each request of `state` the execution still waits for, as the
/// client's answer says: approved only for an accepted form with
/// `approve: true`; any other answer denies it, as the client's decline
/// does on the 2025 path. A request without an answer is left pending.
/// Returns how many were decided.
pub fn decide(
    gateway: &Gateway,
    caller: &Caller,
    state: &State,
    still_waiting: &[String],
    answers: Option<&InputResponses>,
) -> usize {
    // Asked only of a person who may decide their own requests: should
    // the configuration have changed since, nothing is decided.
    if !gateway.may_approve_own(caller) {
        return 0;
    }
    let decider = Decider::client(&caller.identity, true);
    let mut decided = 0;
    for id in &state.requests {
        // Only what this execution waits for now, and only pending: a
        // state answered again decides nothing.
        if !still_waiting.contains(id) {
            continue;
        }
        let Some(answer) = answers.and_then(|a| a.get(id)) else {
            continue;
        };
        let askable = gateway
            .approvals()
            .get(id)
            .is_ok_and(|r| gateway.may_approve_in_client(&caller.identity, &r.tool));
        if !askable {
            continue;
        }
        let to = if approved(answer) {
            Status::Approved
        } else {
            Status::Denied
        };
        match gateway.decide(id, &decider, to) {
            Ok(_) => decided += 1,
            Err(e) => {
                tracing::info!(request = %id, error = %e, "a client's answer decided nothing")
            }
        }
    }
    decided
}

fn approved(answer: &Value) -> bool {
    let Ok(result) = serde_json::from_value::<rmcp::model::ElicitResult>(answer.clone()) else {
        return false;
    };
    matches!(result.action, ElicitationAction::Accept)
        && result
            .content
            .and_then(|c| serde_json::from_value::<Approval>(c).ok())
            .is_some_and(|a| a.approve)
}
