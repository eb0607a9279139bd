//! MCP sessions any replica can continue. rmcp keeps a session in the
//! memory of the replica that opened it; with this store it also writes
//! the client's `initialize` parameters to the deployment's database, and
//! a replica that gets a request for a session it does not know replays
//! them and carries on, instead of answering 404. A load balancer that
//! hashes `Mcp-Session-Id` then sends all of a session's requests to one
//! replica (where elicitation answers must arrive), and when that replica
//! is gone, to another that picks the session up.
//!
//! A session belongs to the identity that opened it ([`SessionOwners`]):
//! a request with someone else's session id is refused on every replica,
//! so a leaked id lets nobody answer another person's elicitation.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use airlock_gateway::state::{SessionRecords, MAX_SESSIONS_PER_IDENTITY, MAX_SESSION_RECORD_BYTES};
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use serde_json::Value;

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
        let Some(text) = restorable(state)? else {
            tracing::debug!("a session's initialize parameters are too large to keep for other replicas; it lives on this one only");
            return Ok(());
        };
        // rmcp only logs a failed store and serves the session anyway, on
        // this replica alone: the others would answer its requests 404.
        // After the database restarts, a pooled connection is found dead
        // only when used (and is then dropped), so a failure is tried
        // again on another before the session is left unshared.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (records, id, text) = (self.0.clone(), session_id.to_string(), text.clone());
            let stored = tokio::task::spawn_blocking(move || records.put(&id, &text))
                .await
                .map_err(failed)
                .and_then(|r| r.map_err(failed));
            match stored {
                Ok(()) => return Ok(()),
                Err(e) if attempts >= STORE_ATTEMPTS => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, attempts, "storing a session for the other replicas failed; trying again")
                }
            }
        }
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        let (records, id) = (self.0.clone(), session_id.to_string());
        tokio::task::spawn_blocking(move || records.delete(&id))
            .await
            .map_err(failed)?
            .map_err(failed)
    }
}

/// Tries at storing a session's record before it is left to this replica.
const STORE_ATTEMPTS: u32 = 3;

/// Longest client name or version kept for a restore.
const MAX_CLIENT_TEXT: usize = 128;

/// The part of a session's state a restore needs: the protocol version,
/// the client's capabilities without `experimental` (free-form, any size),
/// and its name and version, cut. `None` when even that is over
/// [`MAX_SESSION_RECORD_BYTES`]: a client's `initialize` may be up to the
/// request body limit, and the database must not keep that per session.
fn restorable(state: &SessionState) -> Result<Option<String>, SessionStoreError> {
    let mut v = serde_json::to_value(state).map_err(failed)?;
    if let Some(params) = v
        .get_mut("initialize_params")
        .and_then(Value::as_object_mut)
    {
        if let Some(caps) = params
            .get_mut("capabilities")
            .and_then(Value::as_object_mut)
        {
            caps.remove("experimental");
        }
        if let Some(Value::Object(info)) = params.get_mut("clientInfo") {
            info.retain(|k, _| k == "name" || k == "version");
            for text in info.values_mut() {
                if let Value::String(t) = text {
                    if t.len() > MAX_CLIENT_TEXT {
                        let mut end = MAX_CLIENT_TEXT;
                        while !t.is_char_boundary(end) {
                            end -= 1;
                        }
                        t.truncate(end);
                    }
                }
            }
        }
    }
    let text = serde_json::to_string(&v).map_err(failed)?;
    Ok((text.len() <= MAX_SESSION_RECORD_BYTES).then_some(text))
}

/// Most sessions whose owner one replica remembers; beyond, the oldest
/// are forgotten (with PostgreSQL they are looked up again).
const MAX_REMEMBERED: usize = 100_000;

/// Which identity opened which session.
pub struct SessionOwners {
    known: Mutex<Remembered>,
    records: Option<Arc<dyn SessionRecords>>,
}

/// Owners remembered: oldest first overall, and per identity, so that
/// one identity opening many sessions forgets its own oldest
/// ([`MAX_SESSIONS_PER_IDENTITY`]) and never anyone else's.
#[derive(Default)]
struct Remembered {
    owners: HashMap<String, String>,
    /// Ids in the order they were opened; may hold ids already forgotten,
    /// compacted when it grows to twice what is remembered.
    order: VecDeque<String>,
    by_identity: HashMap<String, VecDeque<String>>,
}

impl Remembered {
    fn insert(&mut self, id: &str, identity: &str) {
        if self.owners.contains_key(id) {
            return;
        }
        self.owners.insert(id.to_string(), identity.to_string());
        self.order.push_back(id.to_string());
        let own = self.by_identity.entry(identity.to_string()).or_default();
        own.push_back(id.to_string());
        if own.len() > MAX_SESSIONS_PER_IDENTITY {
            if let Some(oldest) = own.pop_front() {
                self.owners.remove(&oldest);
            }
        }
        while self.owners.len() > MAX_REMEMBERED {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(owner) = self.owners.remove(&oldest) {
                if let Some(own) = self.by_identity.get_mut(&owner) {
                    own.retain(|i| i != &oldest);
                    if own.is_empty() {
                        self.by_identity.remove(&owner);
                    }
                }
            }
        }
        if self.order.len() > 2 * self.owners.len().max(1024) {
            let owners = &self.owners;
            self.order.retain(|i| owners.contains_key(i));
        }
    }
}

/// A new session's owner could not be recorded where the other replicas
/// look: the session must not be handed out.
#[derive(Debug, PartialEq, Eq)]
pub struct Unrecorded;

/// Why a request may not use a session.
#[derive(Debug, PartialEq, Eq)]
pub enum NotYours {
    /// Another identity opened it.
    Other,
    /// The store that knows could not be asked.
    Unknown,
    /// Nobody is recorded as having opened it: it ended, was never
    /// opened, or was opened where its owner could not be recorded (an
    /// older replica, a failed write). Not continued: the client opens a
    /// session of its own.
    NoOwner,
}

impl SessionOwners {
    pub fn new(records: Option<Arc<dyn SessionRecords>>) -> Self {
        Self {
            known: Mutex::new(Remembered::default()),
            records,
        }
    }

    fn remember(&self, id: &str, identity: &str) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, identity);
    }

    /// Sessions whose owner is remembered here (for tests).
    pub fn remembered(&self) -> usize {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .owners
            .len()
    }

    /// Whether `identity` may use session `id`: only the identity
    /// recorded as having opened it. A session with no recorded owner is
    /// refused, never handed to whoever asks first.
    pub async fn check(&self, id: &str, identity: &str) -> Result<(), NotYours> {
        let owner = {
            let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            known.owners.get(id).cloned()
        };
        let owner = match (owner, &self.records) {
            (Some(o), _) => Some(o),
            (None, None) => None,
            (None, Some(records)) => {
                let (records, lookup) = (records.clone(), id.to_string());
                let found = tokio::task::spawn_blocking(move || records.owner(&lookup))
                    .await
                    .map_err(|_| NotYours::Unknown)?
                    .map_err(|e| {
                        tracing::warn!(error = %e, "cannot tell who opened a session; refusing it");
                        NotYours::Unknown
                    })?;
                if let Some(o) = &found {
                    self.remember(id, o);
                }
                found
            }
        };
        match owner {
            Some(o) if o == identity => Ok(()),
            Some(_) => Err(NotYours::Other),
            None => Err(NotYours::NoOwner),
        }
    }

    /// Records that `identity` opened session `id`: here, and for the
    /// other replicas (before the answer reaches the client, so its next
    /// request finds the owner wherever it lands). An error when the
    /// record for the other replicas could not be written: the session is
    /// then forgotten here too, and the caller refuses it, so no session
    /// is ever accepted that the other replicas would answer 404.
    pub async fn bind(&self, id: &str, identity: &str) -> Result<(), Unrecorded> {
        if let Some(records) = &self.records {
            let (records, owned_id, owner) =
                (records.clone(), id.to_string(), identity.to_string());
            let bound = tokio::task::spawn_blocking(move || records.bind(&owned_id, &owner)).await;
            match bound {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not record a new session's owner for the other replicas; the session is refused (503) and the client opens another");
                    return Err(Unrecorded);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "recording a new session's owner failed; the session is refused (503)");
                    return Err(Unrecorded);
                }
            }
        }
        self.remember(id, identity);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(init: Value) -> SessionState {
        serde_json::from_value(json!({ "initialize_params": init })).unwrap()
    }

    use serde_json::json;

    #[test]
    fn a_restore_keeps_what_it_needs_and_no_more() {
        let big = "x".repeat(60_000);
        let s = state(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {}, "experimental": {"junk": {"pad": big}}},
            "clientInfo": {"name": "é".repeat(200), "version": "1.0", "title": big},
        }));
        let text = restorable(&s).unwrap().expect("small once trimmed");
        assert!(text.len() < 1024, "{} bytes", text.len());
        let back: SessionState = serde_json::from_str(&text).unwrap();
        let v = serde_json::to_value(&back).unwrap();
        let p = &v["initialize_params"];
        assert_eq!(p["protocolVersion"], "2025-06-18");
        assert!(p["capabilities"]["elicitation"].is_object());
        assert!(p["capabilities"].get("experimental").is_none());
        assert!(p["clientInfo"]["name"].as_str().unwrap().len() <= MAX_CLIENT_TEXT);
        assert!(p["clientInfo"].get("title").is_none());

        // What stays too large is not kept at all.
        let s = state(json!({
            "protocolVersion": big,
            "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"},
        }));
        assert_eq!(restorable(&s).unwrap(), None);
    }

    #[tokio::test]
    async fn a_session_belongs_to_whoever_opened_it() {
        let owners = SessionOwners::new(None);
        assert_eq!(
            owners.check("s1", "olga").await,
            Err(NotYours::NoOwner),
            "nobody's session is nobody's to continue"
        );
        owners.bind("s1", "alice").await.unwrap();
        assert_eq!(owners.check("s1", "alice").await, Ok(()));
        assert_eq!(owners.check("s1", "olga").await, Err(NotYours::Other));
    }

    /// The review's eviction: one key holder opening many sessions made
    /// the replica forget everyone's owners (their sessions then got
    /// 404). Now it forgets only its own oldest.
    #[tokio::test]
    async fn one_identity_s_many_sessions_forget_only_its_own() {
        let owners = SessionOwners::new(None);
        owners.bind("olga-1", "olga").await.unwrap();
        for i in 0..MAX_REMEMBERED + 10 {
            owners
                .bind(&format!("mallory-{i}"), "mallory")
                .await
                .unwrap();
        }
        assert_eq!(owners.check("olga-1", "olga").await, Ok(()));
        assert_eq!(owners.remembered(), MAX_SESSIONS_PER_IDENTITY + 1);
        let newest = format!("mallory-{}", MAX_REMEMBERED + 9);
        assert_eq!(owners.check(&newest, "mallory").await, Ok(()));
        assert_eq!(
            owners.check("mallory-0", "mallory").await,
            Err(NotYours::NoOwner),
            "its own oldest is forgotten: it opens a new session"
        );
        let held = owners.known.lock().unwrap().order.len();
        assert!(held <= 2 * 1024 + 2, "order compacted: {held}");
    }

    /// 100,000 identities, one session each: at most MAX_REMEMBERED
    /// owners, oldest forgotten first, and no identity's list left behind.
    #[tokio::test]
    async fn many_identities_stay_within_the_bound() {
        let owners = SessionOwners::new(None);
        for i in 0..MAX_REMEMBERED + 5 {
            owners
                .bind(&format!("s-{i}"), &format!("user-{i}"))
                .await
                .unwrap();
        }
        assert_eq!(owners.remembered(), MAX_REMEMBERED);
        let known = owners.known.lock().unwrap();
        assert_eq!(known.by_identity.len(), MAX_REMEMBERED);
        assert!(!known.owners.contains_key("s-0"));
    }
}
