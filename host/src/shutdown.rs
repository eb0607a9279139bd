//! How `airlock serve` learns to stop: SIGTERM, as `systemctl stop` sends
//! it, or Ctrl-C. The SIGTERM handler is installed when a [`StopSignal`]
//! is made, which the servers do before they say they are serving: a
//! SIGTERM that follows at once is then handled (a drain, a clean exit),
//! not the default action that kills the process and leaves its temporary
//! files behind.

use tokio::signal::unix::{signal, Signal, SignalKind};

pub struct StopSignal(Option<Signal>);

impl StopSignal {
    /// Installs the SIGTERM handler now. Where it cannot be installed,
    /// only Ctrl-C stops the server.
    pub fn register() -> Self {
        Self(signal(SignalKind::terminate()).ok())
    }

    /// Resolves on SIGTERM or Ctrl-C.
    pub async fn received(&mut self) {
        match &mut self.0 {
            Some(term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
