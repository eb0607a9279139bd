//! Connecting the parts: the configured backends into a gateway, and the
//! gateway into the sandbox as its only `ToolHost`.

use std::{sync::Arc, time::Duration};

use airlock_sandbox::{ToolCall, ToolFailure, ToolHost};
use airlock_tools::{
    backends::demo::DemoFleet, proxmox::backend::ProxmoxBackend, Backend, Caller, Gateway,
};
use async_trait::async_trait;
use serde_json::Value;

use crate::settings::{ConfigFile, SettingsError};

/// Builds the gateway over the enabled backends (Proxmox first, so its
/// names win a clash); reports name clashes.
pub async fn gateway(file: &ConfigFile) -> Result<Arc<Gateway>, String> {
    let mut backends: Vec<Arc<dyn Backend>> = Vec::new();
    if let Some(p) = file.proxmox.as_ref().filter(|p| !p.targets.is_empty()) {
        let backend = ProxmoxBackend::new(p).await.map_err(|e| e.to_string())?;
        backends.push(Arc::new(backend));
    }
    if file.demo_fleet() {
        backends.push(Arc::new(DemoFleet::new(Duration::from_millis(
            file.backends.demo.latency_ms,
        ))));
    }
    let config = file.gateway().map_err(|e: SettingsError| e.to_string())?;
    let (gateway, clashes) = Gateway::new(config, backends).map_err(|e| e.to_string())?;
    for c in clashes {
        tracing::warn!("{c}");
    }
    Ok(Arc::new(gateway))
}

/// The tool host of one execution: every call goes through the gateway as
/// the execution's caller.
pub struct ScriptTools {
    pub gateway: Arc<Gateway>,
    pub caller: Caller,
}

#[async_trait]
impl ToolHost for ScriptTools {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.gateway
            .call(&self.caller, &call.name, call.args)
            .await
            .map(|called| called.value)
            .map_err(|e| ToolFailure::new(e.code(), e.to_string()).with_details(e.details()))
    }
}
