//! What `/healthz` says of the state store: ready only while it answers.
//!
//! A replica whose database cannot be reached refuses every execution
//! (`StateUnavailable`), so a load balancer should send its traffic to
//! one that can. The check is the store's own cheapest question
//! (`AuditStore::reachable`: `SELECT 1` on PostgreSQL, nothing for a file
//! on this machine), asked at most once per [`FRESH_FOR`] whatever the
//! number of health checks, and never waited on longer than
//! [`ASK_AT_MOST`]: a frozen database makes the replica not ready, not a
//! health check that hangs. The answer says nothing of where the store
//! is (the endpoint is public); the log says the rest.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use airlock_gateway::Gateway;
use tokio::sync::Mutex;

/// How long one answer stands for.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// The longest a health check waits for the store.
pub const ASK_AT_MOST: Duration = Duration::from_secs(2);

pub struct Health {
    gateway: Arc<Gateway>,
    /// The last answer and when it was had.
    last: Mutex<Option<(Instant, bool)>>,
}

impl Health {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self {
            gateway,
            last: Mutex::new(None),
        }
    }

    /// `Ok` while the state store answers. Callers at the same moment
    /// share one question (the lock is held while it is asked).
    pub async fn state(&self) -> Result<(), ()> {
        let mut last = self.last.lock().await;
        if let Some((at, ok)) = *last {
            if at.elapsed() < FRESH_FOR {
                return if ok { Ok(()) } else { Err(()) };
            }
        }
        let gateway = self.gateway.clone();
        let asked = tokio::task::spawn_blocking(move || gateway.state().audit.reachable());
        let ok = match tokio::time::timeout(ASK_AT_MOST, asked).await {
            Ok(Ok(Ok(()))) => true,
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "/healthz: the state store cannot be reached; not ready");
                false
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "/healthz: asking the state store failed; not ready");
                false
            }
            Err(_) => {
                tracing::warn!(
                    waited_ms = ASK_AT_MOST.as_millis() as u64,
                    "/healthz: the state store did not answer in time; not ready"
                );
                false
            }
        };
        *last = Some((Instant::now(), ok));
        if ok && self.gateway.owed_ends() > 0 {
            // Back: the end lines owed since the outage are written in
            // the background, a round at a time (one writer at once),
            // not inside this answer.
            let gateway = self.gateway.clone();
            tokio::task::spawn_blocking(move || {
                gateway.write_owed_ends(airlock_gateway::gateway::owed_ends::IN_THE_BACKGROUND)
            });
        }
        if ok {
            Ok(())
        } else {
            Err(())
        }
    }
}
