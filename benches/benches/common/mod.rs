//! What the gateway benches share: a backend that serves the curated
//! catalog's specs and answers every call at once, so the numbers are the
//! gateway's own (and its state store's), not a backend's.

use airlock_gateway::{Backend, BackendError, Caller, Reply, ToolSpec};
use airlock_proxmox::{curated, tiers::TierRules};
use async_trait::async_trait;
use serde_json::Value;

pub struct Immediate(pub Vec<ToolSpec>);

#[async_trait]
impl Backend for Immediate {
    fn id(&self) -> &str {
        "pve"
    }
    fn tools(&self) -> Vec<ToolSpec> {
        self.0.clone()
    }
    async fn call(&self, _: &Caller, _: &ToolSpec, args: Value) -> Result<Reply, BackendError> {
        Ok(Reply::new(args))
    }
}

/// The curated catalog's specs, with the default tiers.
pub fn curated_specs() -> Vec<ToolSpec> {
    curated::tools(&TierRules::defaults(), &Default::default(), "pve")
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}
