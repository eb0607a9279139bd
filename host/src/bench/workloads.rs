//! The measurements themselves. Each one says what answered the tool
//! calls: the in-process echo host (Airlock's own overhead) or the
//! simulated cluster over HTTPS (end to end).

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use airlock_benches::{EchoHost, WORKLOADS};
use airlock_catalog::{search::Query, Catalog};
use airlock_gateway::Caller;
use airlock_sandbox::{
    Capacity, Limits, Mode, Sandbox, SandboxConfig, ToolCall, ToolFailure, ToolHost,
};
use async_trait::async_trait;
use indicatif::ProgressBar;
use serde_json::Value as Json;

use super::measure::{rss_bytes, Row, Run, Summary, Value};
use crate::{demo, execution::Execution, run::DEMO_SCRIPT, wiring};

pub const ECHO: &str = "in-process echo";
pub const CLUSTER: &str = "simulated cluster (HTTPS, loopback)";

pub async fn sandbox(mode: Mode, in_flight: u32, reuse_runs: u32) -> Result<Sandbox, String> {
    Sandbox::new(SandboxConfig {
        mode,
        reuse_runs,
        capacity: Capacity {
            executions_in_flight: in_flight,
            queue_depth: 4096,
            queue_wait_ms: 600_000,
            // One principal drives every bench: its share is the whole.
            executions_per_identity: Some(in_flight),
            queued_per_identity: Some(4096),
        },
        ..SandboxConfig::default()
    })
    .await
    .map_err(|e| e.to_string())
}

fn row(workload: &str, mode: Mode, host: &str, value: Value) -> Row {
    Row {
        workload: workload.into(),
        mode: mode.to_string(),
        host: host.into(),
        value,
    }
}

async fn timed(
    sandbox: &Sandbox,
    script: &str,
    host: &dyn ToolHost,
    limits: &Limits,
) -> Result<Run, String> {
    let t0 = Instant::now();
    let o = sandbox.execute(script, limits, host).await;
    let took = t0.elapsed();
    match o.error() {
        None => Ok(Run {
            took,
            warm: o.stats.instance_uses > 1,
        }),
        Some(e) => Err(format!("the workload failed: {e}")),
    }
}

/// `warmup` untimed runs (the first ones fill pools and caches), then
/// `runs` timed ones, one after another.
async fn sequential(
    mut run: impl AsyncFnMut() -> Result<Run, String>,
    (warmup, runs): (usize, usize),
    reuse: bool,
    bar: &ProgressBar,
) -> Result<Summary, String> {
    for _ in 0..warmup {
        run().await?;
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        samples.push(run().await?);
        bar.inc(1);
    }
    Ok(Summary::of_runs(&samples, reuse))
}

/// `1+1`, one call, ten sequential, ten under Promise.all: `runs` each,
/// one after another. In `reuse` mode each also runs paced (mode
/// `reuse-paced`): the next execution starts once the last one's instance
/// has its new realm, as when an agent's calls are a model's turn apart.
/// Back to back, the realm builds fall behind and most executions start a
/// fresh instance instead (the rows' warm share).
pub async fn latencies(
    sandbox: &Sandbox,
    mode: Mode,
    runs: usize,
    bar: &ProgressBar,
) -> Result<Vec<Row>, String> {
    let limits = Limits::default();
    let mut rows = Vec::new();
    for (name, script) in WORKLOADS {
        let s = sequential(
            async || timed(sandbox, script, &EchoHost, &limits).await,
            (runs.min(20), runs),
            mode == Mode::Reuse,
            bar,
        )
        .await?;
        rows.push(row(name, mode, ECHO, Value::Latency(s)));
    }
    if mode == Mode::Reuse {
        for (name, script) in WORKLOADS {
            let s = sequential(
                async || {
                    sandbox.settle().await;
                    timed(sandbox, script, &EchoHost, &limits).await
                },
                (runs.min(20), runs),
                true,
                bar,
            )
            .await?;
            rows.push(Row {
                workload: (*name).into(),
                mode: "reuse-paced".into(),
                host: ECHO.into(),
                value: Value::Latency(s),
            });
        }
    }
    Ok(rows)
}

/// The data-work workloads (`airlock_benches::COMPUTE`), fresh, one after
/// another; each run's value is checked, so a faster guest that computes
/// something else fails the bench instead of winning it.
pub async fn compute(runs: usize, bar: &ProgressBar) -> Result<Vec<Row>, String> {
    let sandbox = sandbox(Mode::Fresh, 2, 1).await?;
    let limits = Limits::default();
    let mut rows = Vec::new();
    for (name, script, expected) in airlock_benches::COMPUTE {
        let want: Json = serde_json::from_str(expected).map_err(|e| e.to_string())?;
        let s = sequential(
            async || {
                let t0 = Instant::now();
                let o = sandbox.execute(script, &limits, &EchoHost).await;
                let took = t0.elapsed();
                match &o.result {
                    Ok(v) if *v == want => Ok(Run { took, warm: false }),
                    Ok(v) => Err(format!("{name} answered {v}, expected {want}")),
                    Err(e) => Err(format!("{name} failed: {e}")),
                }
            },
            (1, runs),
            false,
            bar,
        )
        .await?;
        rows.push(Row {
            workload: (*name).into(),
            mode: Mode::Fresh.to_string(),
            host: "none (data work in the guest)".into(),
            value: Value::Latency(s),
        });
    }
    Ok(rows)
}

/// `k` executions of `one_call` started at once, `rounds` times; the
/// latency of each execution.
pub async fn concurrent(
    sandbox: &Sandbox,
    mode: Mode,
    k: usize,
    rounds: usize,
    bar: &ProgressBar,
) -> Result<Row, String> {
    let limits = Limits::default();
    let script = WORKLOADS[1].1;
    let mut samples = Vec::with_capacity(k * rounds);
    for _ in 0..rounds {
        let runs = (0..k).map(|_| timed(sandbox, script, &EchoHost, &limits));
        for r in futures::future::join_all(runs).await {
            samples.push(r?);
        }
        bar.inc(1);
    }
    Ok(row(
        &format!("{k}_concurrent_one_call"),
        mode,
        ECHO,
        Value::Latency(Summary::of_runs(&samples, mode == Mode::Reuse)),
    ))
}

/// Trivial executions per second with `c` of them in flight.
pub async fn throughput(
    sandbox: &Arc<Sandbox>,
    mode: Mode,
    c: usize,
    total: usize,
    bar: &ProgressBar,
) -> Result<Row, String> {
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let workers: Vec<_> = (0..c)
        .map(|_| {
            let (sandbox, next, bar) = (sandbox.clone(), next.clone(), bar.clone());
            tokio::spawn(async move {
                let limits = Limits::default();
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    timed(&sandbox, "1+1", &EchoHost, &limits).await?;
                    bar.inc(1);
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for w in workers {
        w.await.map_err(|e| e.to_string())??;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(row(
        &format!("throughput_c{c}"),
        mode,
        ECHO,
        Value::Throughput {
            concurrency: c,
            executions: total,
            per_second: total as f64 / secs,
        },
    ))
}

/// Holds every call until released, so that many executions stay alive.
struct Hold {
    arrived: AtomicUsize,
    all_in: tokio::sync::watch::Sender<usize>,
    release: tokio::sync::watch::Sender<bool>,
}

#[async_trait]
impl ToolHost for Hold {
    async fn call(&self, _call: ToolCall) -> Result<Json, ToolFailure> {
        let n = self.arrived.fetch_add(1, Ordering::SeqCst) + 1;
        self.all_in.send_replace(n);
        let mut rx = self.release.subscribe();
        let _ = rx.wait_for(|r| *r).await;
        Ok(Json::Null)
    }

    fn principal(&self) -> Option<&str> {
        Some("bench")
    }
}

/// RSS growth with `n` executions alive at once, each parked in a tool
/// call.
pub async fn memory(mode: Mode, n: usize, reuse_runs: u32) -> Result<Row, String> {
    let sandbox = Arc::new(sandbox(mode, n as u32, reuse_runs).await?);
    // One round first, so that pools and caches are not counted.
    timed(&sandbox, "1+1", &EchoHost, &Limits::default()).await?;
    let before = rss_bytes().unwrap_or(0);
    let hold = Arc::new(Hold {
        arrived: AtomicUsize::new(0),
        all_in: tokio::sync::watch::channel(0).0,
        release: tokio::sync::watch::channel(false).0,
    });
    let mut all_in = hold.all_in.subscribe();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (sandbox, hold) = (sandbox.clone(), hold.clone());
            tokio::spawn(async move {
                let o = sandbox
                    .execute("await tools.hold({}); 1", &Limits::default(), hold.as_ref())
                    .await;
                o.is_ok()
            })
        })
        .collect();
    let _ = all_in.wait_for(|k| *k >= n).await;
    let during = rss_bytes().unwrap_or(0);
    hold.release.send_replace(true);
    for t in tasks {
        if !t.await.unwrap_or(false) {
            return Err("a held execution failed".into());
        }
    }
    Ok(row(
        "memory_alive",
        mode,
        ECHO,
        Value::Memory {
            sandboxes: n,
            rss_before_bytes: before,
            rss_during_bytes: during,
            per_sandbox_bytes: during.saturating_sub(before) / n as u64,
        },
    ))
}

/// The fleet report (list nodes, then VMs per node in parallel,
/// aggregate) against the simulated cluster, through the gateway.
pub async fn fleet_report(
    sandbox: &Sandbox,
    mode: Mode,
    runs: usize,
    bar: &ProgressBar,
) -> Result<Row, String> {
    let (sim, config) = demo::start(Duration::from_millis(0), 0).await?;
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    let proxmox = demo::proxmox_section(&sim, &config, &state.path().join("tokens"))
        .map_err(|e| e.to_string())?;
    let mut file = demo::config_file(proxmox, state.path());
    // Measuring, not protecting a cluster: no per-identity call budget.
    file.rate.calls_per_minute = 0;
    let gateway = wiring::gateway(&file).await?;
    let limits = Limits::default();
    // Each run is a whole execution as `exec` and `serve` make it: audited
    // start, the script's calls through the gateway, audited end.
    let s = sequential(
        async || {
            let t0 = Instant::now();
            let execution = Execution::start(&gateway, Caller::new("local"), DEMO_SCRIPT)
                .map_err(|e| e.to_string())?;
            let tools = execution.tools();
            let (outcome, _) = execution.run(sandbox, DEMO_SCRIPT, &limits, &tools).await;
            let took = t0.elapsed();
            match outcome.error() {
                None => Ok(Run {
                    took,
                    warm: outcome.stats.instance_uses > 1,
                }),
                Some(e) => Err(format!("the workload failed: {e}")),
            }
        },
        (runs.min(10), runs),
        mode == Mode::Reuse,
        bar,
    )
    .await?;
    Ok(row("fleet_report", mode, CLUSTER, Value::Latency(s)))
}

/// Spawn `airlock serve` → answered `tools/list`, `runs` times, with the
/// compiled guest already cached.
pub async fn startup(runs: usize, bar: &ProgressBar) -> Result<Row, String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let mut child = tokio::process::Command::new(&exe)
            .arg("serve")
            .env("AIRLOCK_STATE_DIR", state.path())
            .env_remove("AIRLOCK_CONFIG")
            .env("AIRLOCK_LOG", "error")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut stdin = child.stdin.take().expect("piped");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let messages = [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"airlock-bench","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        ];
        stdin
            .write_all(format!("{}\n", messages[0]).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        lines.next_line().await.map_err(|e| e.to_string())?;
        stdin
            .write_all(format!("{}\n{}\n", messages[1], messages[2]).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let answer = lines
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        samples.push(t0.elapsed());
        if !answer.contains("\"execute\"") {
            return Err(format!("tools/list did not answer as expected: {answer}"));
        }
        drop(stdin);
        let _ = child.wait().await;
        bar.inc(1);
    }
    Ok(Row {
        workload: "start_to_tools_list".into(),
        mode: "-".into(),
        host: "airlock serve on stdio (warm cache)".into(),
        value: Value::Latency(Summary::of(&samples)),
    })
}

/// Ranked search over a catalog, a set of everyday queries round robin.
pub fn search(catalog: &Catalog, label: &str, runs: usize, bar: &ProgressBar) -> Row {
    const QUERIES: [&str; 8] = [
        "stop a vm",
        "list containers on a node",
        "snapshot a virtual machine",
        "which storage is full",
        "migrate vm to another node",
        "backup a guest",
        "task log",
        "firewall rules",
    ];
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let t0 = Instant::now();
        let r = catalog.search(&Query {
            text: QUERIES[i % QUERIES.len()].into(),
            ..Query::default()
        });
        samples.push(t0.elapsed());
        std::hint::black_box(r);
        bar.inc(1);
    }
    Row {
        workload: "search".into(),
        mode: "-".into(),
        host: label.into(),
        value: Value::Latency(Summary::of(&samples)),
    }
}

/// What fuel metering costs against the default epoch interruption: the
/// same fresh executions (`1+1`, and a 100,000-iteration loop) on an
/// engine without and with fuel.
pub async fn fuel_cost(runs: usize, bar: &ProgressBar) -> Result<Vec<Row>, String> {
    const CPU: &str = "let s = 0; for (let i = 0; i < 100000; i++) { s += i } s";
    let mut rows = Vec::new();
    for fuel in [false, true] {
        let sandbox = Sandbox::new(SandboxConfig {
            fuel_metering: fuel,
            ..SandboxConfig::default()
        })
        .await
        .map_err(|e| e.to_string())?;
        let limits = Limits {
            fuel: fuel.then_some(u64::MAX / 4),
            ..Limits::default()
        };
        let label = if fuel { "fresh+fuel" } else { "fresh+epoch" };
        for (name, script) in [("one_plus_one", "1+1"), ("cpu_loop_100k", CPU)] {
            let s = sequential(
                async || timed(&sandbox, script, &EchoHost, &limits).await,
                (1, runs),
                false,
                bar,
            )
            .await?;
            rows.push(Row {
                workload: name.into(),
                mode: label.into(),
                host: ECHO.into(),
                value: Value::Latency(s),
            });
        }
    }
    Ok(rows)
}
