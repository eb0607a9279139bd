//! MCP logging for one session: what this session's executions do, sent to
//! the client as `notifications/message` at or above the level it chose
//! with `logging/setLevel`, and always to `tracing`. Messages name tools,
//! codes and counts, never arguments or results, so nothing a tool was
//! given or returned leaks into a log.
//!
//! Until the client chooses, it gets `notice` and above: approvals asked,
//! refusals, failed executions. The line for each execution that went well
//! is `info`, because the result already says as much and a message per
//! `execute` costs every client a parse (with the Python SDK, about as
//! much as the whole `1+1` answer; docs/PERFORMANCE.md).

// MCP logging is deprecated from protocol 2026-07-28 on (SEP-2577), but the
// clients in use today read it; rmcp marks its types accordingly.
#![allow(deprecated)]

use std::sync::{
    atomic::{AtomicU8, Ordering},
    Arc,
};

use rmcp::{
    model::{LoggingLevel, LoggingMessageNotificationParam},
    service::Peer,
    RoleServer,
};
use serde_json::Value;

/// The least severe level the client wants; shared by the session's
/// handlers.
#[derive(Clone, Debug)]
pub struct SessionLog {
    min: Arc<AtomicU8>,
}

impl Default for SessionLog {
    fn default() -> Self {
        Self {
            min: Arc::new(AtomicU8::new(rank(LoggingLevel::Notice))),
        }
    }
}

/// Above every level: nothing is sent.
const NONE: u8 = u8::MAX;

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The levels the handlers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Notice,
    Warning,
}

impl Level {
    fn mcp(self) -> LoggingLevel {
        match self {
            Level::Debug => LoggingLevel::Debug,
            Level::Info => LoggingLevel::Info,
            Level::Notice => LoggingLevel::Notice,
            Level::Warning => LoggingLevel::Warning,
        }
    }
}

impl SessionLog {
    pub fn set(&self, level: LoggingLevel) {
        self.min.store(rank(level), Ordering::Relaxed);
    }

    /// The log one request writes to. A 2025 session's requests share
    /// the session's level (`logging/setLevel`). A 2026-07-28 request has
    /// no session: it gets messages only if its `_meta` asked for them
    /// (`io.modelcontextprotocol/logLevel`), at or above the level asked.
    pub fn for_request(&self, stateless: bool, asked: Option<LoggingLevel>) -> SessionLog {
        if !stateless {
            return self.clone();
        }
        SessionLog {
            min: Arc::new(AtomicU8::new(asked.map(rank).unwrap_or(NONE))),
        }
    }

    pub fn wants(&self, level: Level) -> bool {
        rank(level.mcp()) >= self.min.load(Ordering::Relaxed)
    }

    /// Logs `data` (an object with at least a `message`) to tracing and,
    /// when the client wants this level, to the client.
    pub async fn send(&self, peer: &Peer<RoleServer>, level: Level, data: Value) {
        let message = data.get("message").and_then(Value::as_str).unwrap_or("");
        let mut fields = data.clone();
        if let Some(f) = fields.as_object_mut() {
            f.remove("message");
        }
        match level {
            Level::Debug => tracing::debug!(%fields, "{message}"),
            Level::Info | Level::Notice => tracing::info!(%fields, "{message}"),
            Level::Warning => tracing::warn!(%fields, "{message}"),
        }
        if self.wants(level) {
            let mut param = LoggingMessageNotificationParam::new(level.mcp(), data);
            param.logger = Some("airlock".into());
            // A client that went away is not an error worth reporting.
            let _ = peer.notify_logging_message(param).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chosen_level_filters() {
        let log = SessionLog::default();
        assert!(log.wants(Level::Notice) && !log.wants(Level::Info));
        log.set(LoggingLevel::Info);
        assert!(log.wants(Level::Info) && !log.wants(Level::Debug));
        log.set(LoggingLevel::Warning);
        assert!(!log.wants(Level::Notice) && log.wants(Level::Warning));
        log.set(LoggingLevel::Debug);
        assert!(log.wants(Level::Debug));
    }

    #[test]
    fn a_stateless_request_gets_only_what_it_asked_for() {
        let session = SessionLog::default();
        session.set(LoggingLevel::Debug);
        let unasked = session.for_request(true, None);
        assert!(!unasked.wants(Level::Warning) && !unasked.wants(Level::Debug));
        let asked = session.for_request(true, Some(LoggingLevel::Notice));
        assert!(asked.wants(Level::Notice) && !asked.wants(Level::Info));
        let legacy = session.for_request(false, Some(LoggingLevel::Error));
        assert!(
            legacy.wants(Level::Debug),
            "a session's level rules its requests"
        );
    }
}
