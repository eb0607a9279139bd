//! A small in-process tool host for the sandbox's tests: real async tools
//! with observable side effects (call counts, concurrency), no backend.

#![allow(dead_code)]

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Mutex,
    },
    time::Duration,
};

use airlock_sandbox::{Sandbox, SandboxConfig, ToolCall, ToolFailure, ToolHost};
use async_trait::async_trait;
use serde_json::{json, Value};

#[derive(Default)]
pub struct TestHost {
    pub calls: Mutex<Vec<ToolCall>>,
    current: AtomicU32,
    pub peak: AtomicU32,
}

impl TestHost {
    pub fn names(&self) -> Vec<String> {
        self.calls.lock().unwrap().iter().map(|c| c.name.clone()).collect()
    }

    pub fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    pub fn peak(&self) -> u32 {
        self.peak.load(Ordering::SeqCst)
    }
}

struct InFlight<'a>(&'a TestHost);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl ToolHost for TestHost {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.calls.lock().unwrap().push(call.clone());
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let _guard = InFlight(self);
        let args = &call.args;
        match call.name.as_str() {
            "echo" => Ok(args.clone()),
            "add" => Ok(json!(args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0))),
            "sleep" => {
                let ms = args["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(json!({"slept_ms": ms}))
            }
            "list_nodes" => Ok(json!([
                {"node": "pve1", "status": "online"},
                {"node": "pve2", "status": "online"},
                {"node": "pve3", "status": "offline"},
            ])),
            "fail" => Err(ToolFailure::new(
                args["code"].as_str().unwrap_or("backend_error"),
                args["message"].as_str().unwrap_or("it failed"),
            )
            .with_details(args.get("details").cloned().unwrap_or(Value::Null))),
            "big" => {
                let n = args["bytes"].as_u64().unwrap_or(1024) as usize;
                Ok(Value::String("x".repeat(n)))
            }
            "deep" => {
                let depth = args["depth"].as_u64().unwrap_or(10) as usize;
                let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                // serde_json's own recursion limit applies on the host side
                // too; build the value iteratively instead.
                let mut v = json!([]);
                for _ in 1..depth {
                    v = json!([v]);
                }
                let _ = text;
                Ok(v)
            }
            other => Err(ToolFailure::new("not_found", format!("no tool named {other}"))),
        }
    }
}

pub async fn sandbox(config: SandboxConfig) -> Sandbox {
    Sandbox::new(config).await.expect("sandbox builds")
}
