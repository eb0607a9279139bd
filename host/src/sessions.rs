//! MCP sessions any replica can continue. rmcp keeps a session in the
//! memory of the replica that opened it; with this store it also writes
//! the client's `initialize` parameters to the deployment's database, and
//! a replica that gets a request for a session it does not know replays
//! them and carries on, instead of answering 404. A load balancer that
//! hashes `Mcp-Session-Id` then sends all of a session's requests to one
//! replica (where elicitation answers must arrive), and when that replica
//! is gone, to another that picks the session up.

use std::sync::Arc;

use airlock_gateway::state::SessionRecords;
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

/// rmcp's session store over the gateway's session records.
pub struct SharedSessions(pub Arc<dyn SessionRecords>);

fn failed(e: impl std::fmt::Display) -> SessionStoreError {
    e.to_string().into()
}

#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let (records, id) = (self.0.clone(), session_id.to_string());
        let record = tokio::task::spawn_blocking(move || records.get(&id))
            .await
            .map_err(failed)?
            .map_err(failed)?;
        match record {
            None => Ok(None),
            Some(text) => serde_json::from_str(&text).map(Some).map_err(failed),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let text = serde_json::to_string(state).map_err(failed)?;
        let (records, id) = (self.0.clone(), session_id.to_string());
        tokio::task::spawn_blocking(move || records.put(&id, &text))
            .await
            .map_err(failed)?
            .map_err(failed)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        let (records, id) = (self.0.clone(), session_id.to_string());
        tokio::task::spawn_blocking(move || records.delete(&id))
            .await
            .map_err(failed)?
            .map_err(failed)
    }
}
