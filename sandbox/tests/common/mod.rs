//! A small in-process tool host for the sandbox's tests: real async tools
//! with observable side effects (call log, concurrency, cancellation), no
//! backend.

#![allow(dead_code)]

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Mutex,
    },
    time::Duration,
};

use airlock_sandbox::{Limits, Outcome, Sandbox, SandboxConfig, ToolCall, ToolFailure, ToolHost};
use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};

pub struct TestHost {
    pub calls: Mutex<Vec<ToolCall>>,
    current: AtomicU32,
    peak: AtomicU32,
    /// Calls dropped before they returned (cancelled by the sandbox).
    cancelled: AtomicU32,
    started: watch::Sender<u32>,
    /// `tools.gate()` waits for a permit here.
    pub gate: Semaphore,
    /// Whose calls these are (reuse mode keeps instances per principal).
    pub principal: Option<String>,
    /// `tools.ask({id})` waits (`codes::WAITING`) until its id is here.
    pub approved: Mutex<Vec<String>>,
}

impl Default for TestHost {
    fn default() -> Self {
        Self {
            calls: Mutex::default(),
            current: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            cancelled: AtomicU32::new(0),
            started: watch::channel(0).0,
            gate: Semaphore::new(0),
            principal: Some("tester".into()),
            approved: Mutex::default(),
        }
    }
}

impl TestHost {
    pub fn for_principal(principal: Option<&str>) -> Self {
        Self {
            principal: principal.map(str::to_string),
            ..Self::default()
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    pub fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    pub fn peak(&self) -> u32 {
        self.peak.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> u32 {
        self.current.load(Ordering::SeqCst)
    }

    pub fn cancelled(&self) -> u32 {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once `n` calls have reached the host.
    pub async fn wait_for_calls(&self, n: u32) {
        let mut rx = self.started.subscribe();
        rx.wait_for(|c| *c >= n).await.unwrap();
    }
}

/// Counts a call as in flight until dropped; a drop before `finish` is a
/// cancellation.
struct InFlight<'a> {
    host: &'a TestHost,
    finished: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.host.current.fetch_sub(1, Ordering::SeqCst);
        if !self.finished {
            self.host.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl ToolHost for TestHost {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        self.calls.lock().unwrap().push(call.clone());
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let mut guard = InFlight {
            host: self,
            finished: false,
        };
        self.started.send_modify(|n| *n += 1);
        let args = &call.args;
        let result = match call.name.as_str() {
            "echo" => Ok(args.clone()),
            "add" => Ok(json!(
                args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0)
            )),
            "sleep" => {
                let ms = args["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(json!({"slept_ms": ms}))
            }
            "gate" => {
                self.gate.acquire().await.unwrap().forget();
                Ok(json!("opened"))
            }
            "ask" => {
                let id = args["id"].as_str().unwrap_or("").to_string();
                if self.approved.lock().unwrap().contains(&id) {
                    Ok(json!({"approved": id}))
                } else {
                    Err(ToolFailure::new(
                        airlock_sandbox::codes::WAITING,
                        format!("request {id} waits for another person"),
                    )
                    .with_details(json!({"request_id": id})))
                }
            }
            "node_list" => Ok(json!([
                {"node": "pve1", "status": "online"},
                {"node": "pve2", "status": "online"},
                {"node": "pve3", "status": "offline"},
            ])),
            "fail" => Err(ToolFailure::new(
                args["code"].as_str().unwrap_or("backend_error"),
                args["message"].as_str().unwrap_or("it failed"),
            )
            .with_details(args.get("details").cloned().unwrap_or(Value::Null))),
            "big" => Ok(Value::String(
                "x".repeat(args["bytes"].as_u64().unwrap_or(1024) as usize),
            )),
            "deep" => {
                // Wrapped directly: `json!([v])` would serialize `v` again
                // at every level, recursing as deep as it is.
                let mut v = json!([]);
                for _ in 1..args["depth"].as_u64().unwrap_or(10) {
                    v = Value::Array(vec![v]);
                }
                Ok(v)
            }
            other => Err(ToolFailure::new(
                "not_found",
                format!("no tool named {other}"),
            )),
        };
        guard.finished = true;
        result
    }

    fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }
}

pub async fn sandbox(config: SandboxConfig) -> Sandbox {
    Sandbox::new(config).await.expect("sandbox builds")
}

pub async fn fresh() -> Sandbox {
    sandbox(SandboxConfig::default()).await
}

/// Runs `script` with default limits in a fresh sandbox.
pub async fn run(script: &str) -> Outcome {
    run_with(script, &Limits::default()).await
}

pub async fn run_with(script: &str, limits: &Limits) -> Outcome {
    let host = TestHost::default();
    fresh().await.execute(script, limits, &host).await
}

/// The value of a successful outcome, with the outcome in the panic message
/// otherwise.
pub fn ok(o: &Outcome) -> &Value {
    match &o.result {
        Ok(v) => v,
        Err(e) => panic!("expected success, got {e:?}\nlogs: {:?}", o.logs),
    }
}

/// A hand-written guest: every `airlock` import and the WASI functions a
/// hostile guest might abuse, one page of memory holding `echo{}null` at 0
/// and, at 64, a guest error claiming the host's `queue_depth` limit (55
/// bytes),
/// the exports the host needs, and `body` as the body of
/// `airlock_run($len, $result_bytes, $flags)`.
pub fn wat_guest(body: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
  (import "airlock" "script_read" (func $script_read (param i32 i32)))
  (import "airlock" "call_start" (func $call_start (param i32 i32 i32 i32) (result i32)))
  (import "airlock" "timer_start" (func $timer_start (param i32) (result i32)))
  (import "airlock" "cancel" (func $cancel (param i32)))
  (import "airlock" "wait" (func $wait (param i32) (result i32)))
  (import "airlock" "payload_read" (func $payload_read (param i32 i32)))
  (import "airlock" "log" (func $log (param i32 i32 i32)))
  (import "airlock" "finish" (func $finish (param i32 i32 i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_accept" (func $sock_accept (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "echo{{}}null")
  (data (i32.const 64) "{{\"kind\":\"RuntimeLimit\",\"limit\":\"queue_depth\",\"value\":1}}")
  (func (export "airlock_abi_version") (result i32) i32.const 3)
  (func (export "airlock_reset"))
  (func (export "airlock_run") (param $len i32) (param $result_bytes i32) (param $flags i32)
    (local $i i32)
    {body}))"#
    ))
    .expect("valid wat")
}

/// A field of this process's /proc/self/status, in KiB (`VmRSS:`,
/// `VmHWM:`).
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// This process's resident memory now.
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:") << 10
}
