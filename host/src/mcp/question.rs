//! One approval question put to the person in the MCP client.
//!
//! An execution can end while its question is still open: with
//! `Promise.all`, a sibling call's refusal ends the script while the person
//! is still reading. The question must not linger in the client as if its
//! answer still mattered, and the answer that comes anyway must not be
//! reported as an error. So a question dropped before it was answered is
//! withdrawn (`notifications/cancelled` with the request's id), and its
//! answer, or the client's "cancelled" error, is awaited and discarded for
//! a while. The approval request itself stays in the store for an
//! operator, as the trace says.

use std::time::Duration;

use rmcp::{
    model::{
        CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams,
        ElicitationAction, ElicitationSchema, RequestId, ServerRequest,
    },
    service::{ElicitationMode, Peer, PeerRequestOptions, RequestHandle, ServiceError},
    RoleServer,
};

/// How long the late answer to a withdrawn question is waited for, so that
/// the MCP library has somewhere to deliver it.
const LATE_ANSWER_WAIT: Duration = Duration::from_secs(60);

/// What the person said.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer<T> {
    /// They filled in the form.
    Accepted(T),
    /// They declined it: a no.
    Declined,
    /// They dismissed it without a choice (MCP's `cancel`, and what a
    /// headless client such as `claude -p` answers every question): no
    /// answer at all, so nothing is decided.
    Dismissed,
}

/// Asks `message` with the form of `T` (one yes-or-no field); `Err` when
/// the client could not ask after all, or answered something that is not
/// the form (the request then waits for an operator).
pub async fn ask<T>(peer: &Peer<RoleServer>, message: String) -> Result<Answer<T>, String>
where
    T: schemars::JsonSchema + serde::de::DeserializeOwned,
{
    if !peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Err("the client cannot ask its user with a form".into());
    }
    let requested_schema = ElicitationSchema::from_type::<T>().map_err(|e| e.to_string())?;
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema,
        },
    ));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| e.to_string())?;
    let mut open = Open::new(handle);
    let response = open.answer().await;
    match response {
        Ok(ClientResult::ElicitResult(r)) => match r.action {
            ElicitationAction::Accept => match r.content.map(serde_json::from_value::<T>) {
                Some(Ok(answer)) => Ok(Answer::Accepted(answer)),
                // Not the form: an operator decides.
                _ => Err("the client's answer did not fill in the form".into()),
            },
            ElicitationAction::Decline => Ok(Answer::Declined),
            ElicitationAction::Cancel => Ok(Answer::Dismissed),
            _ => Err(
                "the client answered the approval question in a way Airlock does not know".into(),
            ),
        },
        Ok(_) => Err("the client answered the approval question with something else".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A question sent and not yet answered.
struct Open {
    peer: Peer<RoleServer>,
    id: RequestId,
    rx: Option<tokio::sync::oneshot::Receiver<Result<ClientResult, ServiceError>>>,
}

impl Open {
    fn new(handle: RequestHandle<RoleServer>) -> Self {
        let RequestHandle { rx, peer, id, .. } = handle;
        Self {
            peer,
            id,
            rx: Some(rx),
        }
    }

    async fn answer(&mut self) -> Result<ClientResult, ServiceError> {
        let rx = self.rx.as_mut().expect("asked once");
        let answer = rx.await.map_err(|_| ServiceError::TransportClosed);
        self.rx = None;
        answer?
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let Some(rx) = self.rx.take() else { return };
        let (peer, id) = (self.peer.clone(), self.id.clone());
        // Drop can run outside a runtime (at process exit): then there is
        // no one left to tell.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // Bounded as a whole: a client that reads nothing must not
            // keep this task (and the session's channel) for longer.
            runtime.spawn(tokio::time::timeout(LATE_ANSWER_WAIT, async move {
                let reason = "the execution that asked has ended; the approval request stays open for an operator";
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some(reason.into()),
                    ))
                    .await;
                let _ = rx.await;
            }));
        }
    }
}
