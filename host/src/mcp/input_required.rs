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
//! and to the life of the request it asks (`approval.ttl_secs`, 10
//! minutes by default): it expires with it. A state that is tampered with, another
//! identity's, expired, or names requests no longer pending in that
//! execution decides nothing.
//!
//! The execution waits in the deployment's state meanwhile, so the retry
//! may reach any replica. A client that declared the tasks extension is
//! asked the same questions through its task instead (`tasks.rs`).

use std::time::Duration;

use airlock_catalog::visible::visible;
use airlock_gateway::{approval::Status, decision::Decider, Caller, Gateway};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequests, InputRequiredResult, InputResponses, ProtocolVersion, RequestStateCodec,
    SealOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use super::client_tools::Approval;

/// The shortest life a sealed state is given, so a request about to
/// expire can still be answered in time to be refused clearly.
const MIN_STATE_TTL: Duration = Duration::from_secs(1);

/// What a state is bound to besides its payload: the identity, and a
/// digest of the `execute` arguments it answers (a retry must send the
/// same call again, not another script).
fn bound_to(identity: &str, args: &Value) -> Vec<u8> {
    use sha2::Digest;
    let mut ad = identity.as_bytes().to_vec();
    ad.push(0);
    ad.extend_from_slice(&Sha256::digest(
        serde_json::to_vec(args).expect("JSON always serializes"),
    ));
    ad
}

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
    // Not an HMAC of a label under the secret: approvers' tags of secrets
    // are HMACs of the secrets' values under it, and a value can be any
    // string, so no tag an agent sees may be this key.
    let key = <Sha256 as sha2::Digest>::digest(
        [b"airlock requestState v2\0".as_slice(), &secret].concat(),
    );
    RequestStateCodec::try_new(key.to_vec()).map_err(|e| StateError::NoKey(e.to_string()))
}

/// The questions for the requests of `execution` the person in the client
/// may decide, with their sealed state; `None` when there are none (four
/// eyes: someone else decides, and the waiting answer says who).
///
/// As on the 2025 path, against approval fatigue: one question a round,
/// none once the person declined one of this execution or was asked
/// [`super::client_tools::MAX_PROMPTS`] times (`prompts`), and none for
/// arguments too long to read in full in a client (an operator decides
/// those, reading them with `airlock approvals show`).
pub fn ask(
    gateway: &Gateway,
    caller: &Caller,
    execution: &str,
    requests: &[String],
    args: &Value,
    prompts: crate::durable::Prompts,
) -> Option<InputRequiredResult> {
    let (questions, asked) = questions(gateway, caller, requests, prompts)?;
    // The state lives as long as the request it asks: answered later,
    // there is nothing left to decide.
    let ttl = asked
        .iter()
        .filter_map(|id| gateway.approvals().get(id).ok())
        .map(|r| r.expires_ms.saturating_sub(gateway.now_ms()).max(0) as u64)
        .min()
        .map_or(MIN_STATE_TTL, |ms| {
            Duration::from_millis(ms).max(MIN_STATE_TTL)
        });
    let state = State {
        execution: execution.to_string(),
        requests: asked,
    };
    let sealed = codec(gateway)
        .ok()?
        .seal_json_with(
            &state,
            &SealOptions::new()
                .associated_data(&bound_to(&caller.identity, args))
                .ttl(ttl),
        )
        .ok()?;
    Some(InputRequiredResult::new(Some(questions), Some(sealed)))
}

/// The question to put to the person now, keyed by its request id (one
/// a round; see [`ask`]), and the ids asked; `None` when nothing is
/// asked. A task's `input_required` status carries the same questions.
pub fn questions(
    gateway: &Gateway,
    caller: &Caller,
    requests: &[String],
    prompts: crate::durable::Prompts,
) -> Option<(InputRequests, Vec<String>)> {
    if !gateway.may_approve_own(caller)
        || prompts.declined
        || prompts.asked >= super::client_tools::MAX_PROMPTS
    {
        return None;
    }
    let mut questions = InputRequests::new();
    let mut asked = Vec::new();
    for id in requests {
        let Ok(r) = gateway.approvals().get(id) else {
            continue;
        };
        if r.status != Status::Pending
            || r.identity != caller.identity
            || !gateway.may_approve_in_client(&caller.identity, &r.tool)
        {
            continue;
        }
        // The person approves what they read: the arguments in full when
        // the list form summarised a long value.
        let shown = match &r.detail {
            Some(full) if full.len() <= super::client_tools::MAX_PROMPT_DETAIL_BYTES => full,
            Some(_) => continue,
            None => &r.summary,
        };
        let schema = ElicitationSchema::from_type::<Approval>().ok()?;
        let message = format!(
            "Airlock: identity {} wants to run {}({}). Approve this one call? (request {id})",
            visible(&caller.identity),
            visible(&r.tool),
            visible(shown)
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
        break;
    }
    if asked.is_empty() {
        return None;
    }
    Some((questions, asked))
}

/// Opens a state the client sent back, for this identity and this call.
pub fn open(
    gateway: &Gateway,
    identity: &str,
    args: &Value,
    sealed: &str,
) -> Result<State, StateError> {
    codec(gateway)?
        .open_json_with(sealed, &bound_to(identity, args))
        .map_err(|e| StateError::Unsealed(e.to_string()))
}

/// What the person's answers to one round of questions came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decided {
    /// Requests decided (approved or denied).
    pub decided: usize,
    /// The person is not asked again in this execution: they declined a
    /// request, or dismissed a question without a choice.
    pub done_asking: bool,
}

/// Decides each request of `state` the execution still waits for, as the
/// client's answer says: an accepted form with `approve: true` approves,
/// `approve: false` or a decline denies (as on the 2025 path). A cancel
/// (the question dismissed without a choice, as a headless client
/// answers every question) decides nothing: the request stays open for
/// an operator, and the person is not asked again in this execution. No
/// answer, or one Airlock cannot read, leaves it pending. Once the person
/// declined or dismissed a question of this execution (`prompts`), an
/// answer sent anyway (the same state again, say) decides nothing.
pub fn decide(
    gateway: &Gateway,
    caller: &Caller,
    state: &State,
    still_waiting: &[String],
    answers: Option<&InputResponses>,
    prompts: crate::durable::Prompts,
) -> Decided {
    if prompts.declined {
        return Decided {
            decided: 0,
            done_asking: true,
        };
    }
    // Asked only of a person who may decide their own requests: should
    // the configuration have changed since, nothing is decided.
    if !gateway.may_approve_own(caller) {
        return Decided::default();
    }
    let decider = Decider::client(&caller.identity, true);
    let mut out = Decided::default();
    for id in &state.requests {
        // Only what this execution waits for now, and only pending: a
        // state answered again decides nothing.
        if !still_waiting.contains(id) {
            continue;
        }
        let Some(answer) = answers.and_then(|a| a.get(id)) else {
            continue;
        };
        let askable = gateway.approvals().get(id).is_ok_and(|r| {
            r.identity == caller.identity
                && gateway.may_approve_in_client(&caller.identity, &r.tool)
        });
        if !askable {
            continue;
        }
        let to = match said(answer) {
            Some(Said::Yes) => Status::Approved,
            Some(Said::No) => Status::Denied,
            Some(Said::NoChoice) => {
                out.done_asking = true;
                continue;
            }
            None => continue,
        };
        match gateway.decide(id, &decider, to) {
            Ok(_) => {
                out.decided += 1;
                out.done_asking |= to == Status::Denied;
            }
            Err(e) => {
                tracing::info!(request = %id, error = %e, "a client's answer decided nothing")
            }
        }
    }
    out
}

/// What the person said to one question.
enum Said {
    Yes,
    No,
    /// Dismissed without a choice (MCP's `cancel`).
    NoChoice,
}

/// The person's answer, or `None` for nothing Airlock can read.
fn said(answer: &Value) -> Option<Said> {
    let result = serde_json::from_value::<rmcp::model::ElicitResult>(answer.clone()).ok()?;
    match result.action {
        ElicitationAction::Accept => result
            .content
            .and_then(|c| serde_json::from_value::<Approval>(c).ok())
            .map(|a| if a.approve { Said::Yes } else { Said::No }),
        ElicitationAction::Decline => Some(Said::No),
        ElicitationAction::Cancel => Some(Said::NoChoice),
        _ => None,
    }
}
