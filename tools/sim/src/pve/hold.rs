//! Requests held at the door: a test holds the requests of one HTTP
//! method as they arrive, before the cluster sees them, to act while they
//! are in flight (kill the client that sent them, say), then lets them
//! through — the way a slow or stalled pveproxy keeps a client waiting.

use tokio::sync::watch;

#[derive(Clone, Debug, Default)]
struct State {
    /// The method held now.
    method: Option<String>,
    /// Requests that arrived while it was held.
    arrived: usize,
}

pub(crate) struct Holds {
    state: watch::Sender<State>,
}

impl Holds {
    pub(crate) fn new() -> Self {
        Self {
            state: watch::Sender::new(State::default()),
        }
    }

    /// Waits here while requests of `method` are held.
    pub(crate) async fn door(&self, method: &str) {
        let mut rx = self.state.subscribe();
        let held = self.state.send_if_modified(|s| {
            let held = s.method.as_deref() == Some(method);
            if held {
                s.arrived += 1;
            }
            held
        });
        if held {
            let _ = rx.wait_for(|s| s.method.as_deref() != Some(method)).await;
        }
    }

    pub(crate) fn hold(&self, method: &str) -> Hold<'_> {
        self.state.send_replace(State {
            method: Some(method.to_string()),
            arrived: 0,
        });
        Hold { holds: self }
    }
}

/// Requests of one method held until this is dropped.
pub struct Hold<'a> {
    holds: &'a Holds,
}

impl Hold<'_> {
    /// Waits until `n` requests are held.
    pub async fn arrived(&self, n: usize) {
        let mut rx = self.holds.state.subscribe();
        let _ = rx.wait_for(|s| s.arrived >= n).await;
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.holds.state.send_replace(State::default());
    }
}
