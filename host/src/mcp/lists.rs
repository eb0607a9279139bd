//! Telling a session's client that the collector's resources or prompts
//! changed (`notifications/resources/list_changed` and
//! `notifications/prompts/list_changed`), as a collector that comes up late
//! or adds a runbook changes them. Airlock's own three tools never change,
//! so tools have no such notice.

use std::sync::{Arc, Mutex};

use airlock_collector::Collector;
use rmcp::{service::Peer, RoleServer};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Ends the session's follower when the last clone of the session's
/// server is dropped (the session ended), so no task outlives it.
#[derive(Clone, Default)]
pub struct Follower(Arc<Mutex<Option<DropGuard>>>);

impl Follower {
    /// Starts following `collector` for `peer`; a second call (a client
    /// sending `initialized` twice) replaces the first follower.
    pub fn start(&self, collector: &Arc<Collector>, peer: Peer<RoleServer>) {
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
