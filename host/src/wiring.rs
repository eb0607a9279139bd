//! Connecting the parts: the configured backends into a gateway, and the
//! gateway into the sandbox as its only `ToolHost`.

use std::{sync::Arc, time::Duration};

use airlock_collector::{Collector, CollectorConfig};
use airlock_gateway::{Backend, CallError, Caller, Gateway};
use airlock_proxmox::backend::ProxmoxBackend;
use airlock_sandbox::{ToolCall, ToolFailure, ToolHost};
use async_trait::async_trait;
use serde_json::Value;

use crate::settings::{ConfigFile, SettingsError};

/// Builds the gateway over the enabled backends (Proxmox first, so its
/// names win a clash); reports name clashes.
pub async fn gateway(file: &ConfigFile) -> Result<Arc<Gateway>, String> {
    wire(file).await.map(|w| w.gateway)
}

/// The gateway, and the collector when one is configured (the MCP server
/// offers its resources and prompts).
pub struct Wired {
    pub gateway: Arc<Gateway>,
    pub collector: Option<Arc<Collector>>,
}

/// Starts a configured collector: one discovery now (so its tools are
/// there from the first request when it is up), then in the background.
/// A collector that is down does not stop Airlock.
async fn collector(config: &CollectorConfig) -> Result<Arc<Collector>, String> {
    let collector =
        Arc::new(Collector::new(config.clone()).map_err(|e| format!("QuoxCORE collector: {e}"))?);
    let first = Duration::from_secs(config.timeout_secs.clamp(1, 5));
    match tokio::time::timeout(first, collector.discover()).await {
        Ok(Ok(())) => tracing::info!(
            url = %config.url,
            tools = collector.tool_count(),
            "QuoxCORE collector discovered"
        ),
        Ok(Err(e)) => tracing::warn!(
            url = %config.url,
            "QuoxCORE collector: {e}; starting without its tools and retrying in the background"
        ),
        Err(_) => tracing::warn!(
            url = %config.url,
            "QuoxCORE collector did not answer within {} s; starting without its tools and retrying in the background",
            first.as_secs()
        ),
    }
    collector.keep_discovering();
    Ok(collector)
}

pub async fn wire(file: &ConfigFile) -> Result<Wired, String> {
    let mut backends: Vec<Arc<dyn Backend>> = Vec::new();
    if let Some(p) = &file.proxmox {
        if p.targets.is_empty() {
            return Err(
                "[proxmox] names no target: add a [proxmox.targets.NAME] table (url, \
                fingerprint or ca_file, tokens), or remove [proxmox] to run against the \
                simulated cluster"
                    .into(),
            );
        }
        let backend = ProxmoxBackend::new(p).await.map_err(|e| e.to_string())?;
        backends.push(Arc::new(backend));
    }
    let quox = match &file.collector {
        Some(c) => {
            let c = collector(c).await?;
            backends.push(c.clone());
            Some(c)
        }
        None => None,
    };
    let (config, place) = file.gateway().map_err(|e: SettingsError| e.to_string())?;
    let (gateway, clashes) = Gateway::new(config, backends, &place).map_err(|e| e.to_string())?;
    let gateway = gateway.with_observer(crate::metrics::global().clone());
    for c in clashes {
        tracing::warn!("{c}");
    }
    Ok(Wired {
        gateway: Arc::new(gateway),
        collector: quox,
    })
}

/// A refused or failed call as the script gets it — or, in a durable
/// execution (`durable`), a call that needs another person's decision as
/// the sandbox's `waiting`, so the execution parks until it is decided.
pub fn call_failure(gateway: &Gateway, e: &CallError, durable: bool) -> ToolFailure {
    match e {
        CallError::ApprovalRequired {
            tool,
            request_id,
            how,
            summary,
        } if durable => {
            let how = gateway.wait_instruction(request_id, how);
            ToolFailure::new(
                airlock_sandbox::codes::WAITING,
                format!("{tool} waits for approval request {request_id}: {how}"),
            )
            .with_details(
                serde_json::json!({"request_id": request_id, "summary": summary, "how": how}),
            )
        }
        e => ToolFailure::new(e.code(), e.to_string()).with_details(e.details()),
    }
}

/// The code a call gets when a runbook may not run there (or refuses a
/// call of its own).
pub const RUNBOOK_REFUSED: &str = "runbook_refused";

/// The name after `runbooks.`, if `tool` is a runbook's.
pub fn runbook_name(tool: &str) -> Option<&str> {
    tool.strip_prefix("runbooks.")
}

/// The refusal for a runbook called where none can run.
pub fn not_here() -> ToolFailure {
    ToolFailure::new(
        RUNBOOK_REFUSED,
        "a runbook is run by an execution's own script (execute, exec), not by a runbook's",
    )
}

/// What a script's tool host asks of the runbooks it runs (`runbooks.rs`
/// runs them, each one's own calls through a `ScriptTools` of its own).
#[async_trait]
pub trait Runbooks: Send + Sync {
    /// Whether the script has used its `tool_calls`, its runbooks' calls
    /// counted.
    fn over_calls(&self, note: &airlock_sandbox::CallNote) -> Result<(), ToolFailure>;

    /// Runs runbook `name` with `args` for `caller`; its value.
    async fn run(
        &self,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        name: &str,
        args: Value,
        note: &airlock_sandbox::CallNote,
    ) -> Result<Value, ToolFailure>;
}

/// A runbook's own calls' share of its caller's `tool_calls`.
pub trait CallShare: Send + Sync {
    /// Counts one call; refused past the caller's limit.
    fn take(&self) -> Result<(), ToolFailure>;
}

/// The tool host of one execution: every call goes through the gateway as
/// the execution's caller.
pub struct ScriptTools {
    pub gateway: Arc<Gateway>,
    pub caller: Caller,
    /// Runs the runbooks the script calls; `None` where none may run (a
    /// runbook's own script, a benchmark).
    pub runbooks: Option<Arc<dyn Runbooks>>,
    /// For a runbook's own script: its calls' share of its caller's
    /// `tool_calls`.
    pub budget: Option<Box<dyn CallShare>>,
    /// The execution is durable (`airlock exec` waiting for decisions): a
    /// call that needs another person's decision waits instead of
    /// failing.
    pub durable: bool,
}

#[async_trait]
impl ToolHost for ScriptTools {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        if let Some(runner) = &self.runbooks {
            runner.over_calls(&call.note)?;
        }
        if let Some(budget) = &self.budget {
            budget.take()?;
        }
        if let Some(name) = runbook_name(&call.name) {
            return match &self.runbooks {
                Some(runner) => {
                    runner
                        .run(&self.gateway, &self.caller, name, call.args, &call.note)
                        .await
                }
                None => Err(not_here()),
            };
        }
        self.gateway
            .call(
                &Caller {
                    script_call: call.note.call_id(),
                    ..self.caller.clone()
                },
                &call.name,
                call.args,
            )
            .await
            .map(|called| called.value)
            .map_err(|e| call_failure(&self.gateway, &e, self.durable))
    }

    fn principal(&self) -> Option<&str> {
        Some(&self.caller.identity)
    }
}
