//! Telling a session's client that the collector's resources or prompts
//! changed (`notifications/resources/list_changed` and
//! `notifications/prompts/list_changed`), as a collector that comes up late
//! or adds a runbook changes them. Airlock's own three tools never change,
//! so tools have no such notice.
//!
//! Over HTTP a session ends after 5 minutes without traffic, and a notice
//! counts as traffic; so a follower stops once its client has asked nothing
//! for [`HTTP_IDLE`], or a collector that keeps changing its lists would
//! keep every abandoned session alive.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use airlock_collector::Collector;
use rmcp::{service::Peer, RoleServer};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Below rmcp's 5-minute keep-alive for HTTP sessions.
pub const HTTP_IDLE: Duration = Duration::from_secs(240);

/// When the session's client last asked something.
#[derive(Clone)]
pub struct Activity(Arc<Mutex<Instant>>);

impl Default for Activity {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Instant::now())))
    }
}

impl Activity {
    pub fn touch(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle(&self) -> Duration {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
    }
}

/// Ends the session's follower when the last clone of the session's
/// server is dropped (the session ended), so no task outlives it.
#[derive(Clone, Default)]
pub struct Follower(Arc<Mutex<Option<DropGuard>>>);

impl Follower {
    /// Starts following `collector` for `peer`; a second call (a client
    /// sending `initialized` twice) replaces the first follower. With
    /// `idle_limit`, the follower ends once `activity` is that old.
    pub fn start(
        &self,
        collector: &Arc<Collector>,
        peer: Peer<RoleServer>,
        activity: Activity,
        idle_limit: Option<Duration>,
    ) {
        let mut lists = collector.watch_lists();
        lists.mark_unchanged();
        let stop = CancellationToken::new();
        let guard = stop.clone().drop_guard();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    changed = lists.changed() => {
                        if changed.is_err() {
                            return; // the collector is gone
                        }
                        if idle_limit.is_some_and(|limit| activity.idle() > limit) {
                            return; // an abandoned session: let it expire
                        }
                        // A client that went away ends the follower too.
                        if peer.notify_resource_list_changed().await.is_err()
                            || peer.notify_prompt_list_changed().await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
    }
}
