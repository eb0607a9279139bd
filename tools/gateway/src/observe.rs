//! What the gateway reports as it works, for whoever counts (the host's
//! Prometheus metrics). The gateway calls an [`Observer`] and knows
//! nothing of how it is exported. Every label it passes comes from a
//! bounded set: a tool name the catalog has (else [`UNKNOWN_TOOL`]), an
//! audit decision word, a limit's name.

use std::{
    io::Write,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Map, Value};

use crate::audit::{AuditError, AuditStore, Head, Verdict};

/// The tool label of a call whose name is not in the catalog: a script
/// can make up any number of names, and each must not become a series.
pub const UNKNOWN_TOOL: &str = "(unknown)";

pub trait Observer: Send + Sync {
    /// One gateway call ended: `tool` (a catalog name or
    /// [`UNKNOWN_TOOL`]), the audit's decision word, how long it took.
    fn call(&self, tool: &str, decision: &'static str, elapsed: Duration);

    /// A gateway limit refused a call (`rate.calls_per_minute`,
    /// `approval.max_open_per_identity`).
    fn limit_hit(&self, limit: &'static str);

    /// One audit append, and whether it was written.
    fn audit_append(&self, elapsed: Duration, written: bool);
}

/// Told when a request starts waiting for a person (a single call's or a
/// plan's), to let people know (the console's webhook). Called on the
/// call's own path: it must return at once, never wait on the network.
pub trait Filed: Send + Sync {
    fn filed(&self, request: &crate::approval::Request);
}

/// An audit store that times its appends for an observer.
pub(crate) struct TimedAudit {
    pub(crate) inner: Arc<dyn AuditStore>,
    pub(crate) observer: Arc<dyn Observer>,
}

impl AuditStore for TimedAudit {
    fn append(&self, event: &str, fields: Map<String, Value>) -> Result<Head, AuditError> {
        let started = Instant::now();
        let result = self.inner.append(event, fields);
        self.observer
            .audit_append(started.elapsed(), result.is_ok());
        result
    }

    fn verify(&self) -> Result<Verdict, AuditError> {
        self.inner.verify()
    }

    fn export(&self, out: &mut dyn Write) -> Result<u64, AuditError> {
        self.inner.export(out)
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn file(&self) -> Option<&Path> {
        self.inner.file()
    }

    fn reachable(&self) -> Result<(), AuditError> {
        self.inner.reachable()
    }
}
