//! Runs one script many times in one mode and prints latency percentiles;
//! handy under `perf record`:
//! `cargo run --release -p airlock-sandbox --example loop -- fresh 20000 '1+1'`
//! Environment: `SETTLE=1` waits for reuse resets between executions,
//! `NO_SNAPSHOT=1` starts instances without the pre-initialised realm,
//! `WORKERS=n` uses a multi-thread runtime.

use airlock_sandbox::{
    Capacity, Limits, Mode, Sandbox, SandboxConfig, ToolCall, ToolFailure, ToolHost,
};

struct Echo;

#[async_trait::async_trait]
impl ToolHost for Echo {
    async fn call(&self, call: ToolCall) -> Result<serde_json::Value, ToolFailure> {
        Ok(call.args)
    }
}

fn main() {
    // WORKERS=n runs on a multi-thread runtime (the default is one thread,
    // where a reuse instance's realm reset and the next script share a core).
    let rt = match std::env::var("WORKERS").ok().and_then(|w| w.parse().ok()) {
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    };
    rt.unwrap().block_on(run());
}

async fn run() {
    let mut args = std::env::args().skip(1);
    let mode: Mode = args.next().unwrap_or("fresh".into()).parse().unwrap();
    let n: usize = args.next().unwrap_or("10000".into()).parse().unwrap();
    let script = args.next().unwrap_or("1+1".into());
    let settle = std::env::var_os("SETTLE").is_some();
    let sandbox = Sandbox::new(SandboxConfig {
        mode,
        capacity: Capacity {
            executions_in_flight: 2,
            ..Capacity::default()
        },
        snapshot: std::env::var_os("NO_SNAPSHOT").is_none(),
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let limits = Limits::default();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        if settle {
            sandbox.settle().await;
        }
        let t = std::time::Instant::now();
        let o = sandbox.execute(&script, &limits, &Echo).await;
        times.push(t.elapsed().as_nanos() as u64);
        assert!(o.is_ok(), "{:?}", o.result);
    }
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0;
    println!(
        "{mode} n={n} p50={:.1}us p95={:.1}us p99={:.1}us max={:.1}us",
        pct(0.5),
        pct(0.95),
        pct(0.99),
        pct(1.0)
    );
}
