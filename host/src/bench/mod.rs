//! `airlock bench`: the numbers people choose a mode and limits by. Runs
//! each workload in each sandbox mode, prints a table and writes JSON.
//! Overhead numbers use an in-process echo tool host; end-to-end numbers
//! use the simulated cluster over HTTPS; every row says which.

mod chart;
mod clients;
mod measure;
mod workloads;

use std::{path::PathBuf, process::ExitCode, sync::Arc};

use airlock_catalog::Catalog;
use airlock_proxmox::{apidata, curated, full, tiers::TierRules};
use airlock_sandbox::Mode;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

pub use measure::{Row, Summary, Value};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Executions per latency workload (after a warm-up).
    #[arg(long, default_value_t = 500)]
    pub runs: usize,
    /// Sandbox modes to measure.
    #[arg(long, value_delimiter = ',', default_value = "fresh,reuse")]
    pub modes: Vec<Mode>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/bench/airlock-bench.json")]
    pub json: PathBuf,
    /// Where to draw the latency chart (SVG).
    #[arg(long, default_value = "target/bench/latency.svg")]
    pub svg: PathBuf,
    /// The real PVE API schema (apidata.js or its JSON), to time search
    /// over the full catalog too.
    #[arg(long, env = "AIRLOCK_PVE_APIDATA")]
    pub pve_apidata: Option<PathBuf>,
    /// Also measure what fuel metering costs against epoch interruption
    /// (compiles a second, fuel-metered guest the first time).
    #[arg(long)]
    pub fuel: bool,
    /// Executions one instance serves in reuse mode.
    #[arg(long, default_value_t = airlock_sandbox::SandboxConfig::default().reuse_runs)]
    pub reuse_runs: u32,
    /// Sandboxes kept alive at once for the memory measurement.
    #[arg(long, default_value_t = 100)]
    pub alive: usize,
    /// Executions per data-work workload (sorting, grouping, JSON, regex:
    /// the guest's own speed), in fresh mode.
    #[arg(long, default_value_t = 10)]
    pub compute_runs: usize,
    /// Measure only the data-work workloads (to compare guest builds).
    #[arg(long)]
    pub compute_only: bool,
    /// Measure only one request over HTTP from the clients agents use
    /// (Node's fetch, the TypeScript and Python SDKs, curl).
    #[arg(long)]
    pub clients_only: bool,
    /// The `airlock` binary whose `serve --http` the clients talk to
    /// (default: this one), to set two builds side by side.
    #[arg(long)]
    pub server: Option<PathBuf>,
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len as u64);
    if let Ok(style) = ProgressStyle::with_template("{msg:38} {bar:30} {pos}/{len} {elapsed}") {
        b.set_style(style);
    }
    b.set_message(what.to_string());
    b
}

pub async fn run(args: BenchArgs) -> ExitCode {
    match measure_all(&args).await {
        Ok(rows) => {
            print_table(&rows);
            let report = json!({
                "airlock": env!("CARGO_PKG_VERSION"),
                "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
                "runs": args.runs,
                "rows": rows,
            });
            let outputs = [
                (
                    &args.json,
                    serde_json::to_string_pretty(&report).unwrap_or_default(),
                ),
                (&args.svg, chart::latency_svg(&rows)),
            ];
            for (path, text) in outputs {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    let _ = std::fs::create_dir_all(dir);
                }
                if let Err(e) = std::fs::write(path, text) {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    return ExitCode::from(2);
                }
                eprintln!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn measure_all(args: &BenchArgs) -> Result<Vec<Row>, String> {
    if args.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    let runs = args.runs;
    let mut rows = Vec::new();
    if !args.clients_only {
        let n = args.compute_runs.max(1);
        let b = bar(n * airlock_benches::COMPUTE.len(), "data work in the guest");
        rows.extend(workloads::compute(n, &b).await?);
        b.finish_and_clear();
    }
    if args.compute_only {
        return Ok(rows);
    }
    {
        let server = match &args.server {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(|e| e.to_string())?,
        };
        let b = bar(4, "one request over HTTP, by client");
        let (measured, left_out) = clients::kept_alive(&server, (runs / 2).max(50), &b).await?;
        b.finish_and_clear();
        for why in left_out {
            eprintln!("left out: {why}");
        }
        rows.extend(measured);
    }
    if args.clients_only {
        return Ok(rows);
    }
    for &mode in &args.modes {
        let sandbox = Arc::new(workloads::sandbox(mode, 64, args.reuse_runs.max(1)).await?);
        // Reuse runs each workload twice: back to back, then paced.
        let passes = if mode == Mode::Reuse { 2 } else { 1 };
        let b = bar(
            passes * runs * airlock_benches::WORKLOADS.len(),
            &format!("{mode}: latency workloads"),
        );
        rows.extend(workloads::latencies(&sandbox, mode, runs, &b).await?);
        b.finish_and_clear();

        for k in [8, 64] {
            let rounds = (runs / k).max(10);
            let b = bar(rounds, &format!("{mode}: {k} concurrent executions"));
            rows.push(workloads::concurrent(&sandbox, mode, k, rounds, &b).await?);
            b.finish_and_clear();
        }

        let total = (runs * 4).max(200);
        for c in [1, 2, 4, 8, 16, 32, 64] {
            let b = bar(total, &format!("{mode}: throughput at concurrency {c}"));
            rows.push(workloads::throughput(&sandbox, mode, c, total, &b).await?);
            b.finish_and_clear();
        }

        let b = bar(1, &format!("{mode}: {} sandboxes alive", args.alive));
        rows.push(workloads::memory(mode, args.alive.max(1), args.reuse_runs.max(1)).await?);
        b.finish_and_clear();

        let e2e = (runs / 5).max(20);
        let b = bar(e2e, &format!("{mode}: fleet report, simulated cluster"));
        rows.push(workloads::fleet_report(&sandbox, mode, e2e, &b).await?);
        b.finish_and_clear();
    }

    if args.fuel {
        let n = (runs / 5).max(20);
        let b = bar(n * 4, "epoch vs fuel");
        rows.extend(workloads::fuel_cost(n, &b).await?);
        b.finish_and_clear();
    }

    let b = bar(20, "start to tools/list");
    rows.push(workloads::startup(20, &b).await?);
    b.finish_and_clear();

    let searches = runs * 4;
    let curated = curated::tools(&TierRules::defaults(), &Default::default(), "pve");
    let n = curated.len();
    let (catalog, _) = Catalog::build(vec![(
        "pve".into(),
        curated.into_iter().map(|(s, _)| s).collect(),
    )])
    .map_err(|e| e.to_string())?;
    let b = bar(searches, "search, curated catalog");
    rows.push(workloads::search(
        &catalog,
        &format!("curated catalog ({n} tools)"),
        searches,
        &b,
    ));
    b.finish_and_clear();
    if let Some(path) = &args.pve_apidata {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--pve-apidata {}: {e}", path.display()))?;
        let ops = apidata::parse_text(&text).map_err(|e| e.to_string())?;
        let specs: Vec<_> = full::generate(&ops, &TierRules::defaults(), "pve")
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        let n = specs.len();
        let (catalog, _) =
            Catalog::build(vec![("pve".into(), specs)]).map_err(|e| e.to_string())?;
        let b = bar(searches, "search, full catalog");
        rows.push(workloads::search(
            &catalog,
            &format!("full PVE 9.1 catalog ({n} tools)"),
            searches,
            &b,
        ));
        b.finish_and_clear();
    }
    Ok(rows)
}

fn ms(us: f64) -> String {
    format!("{:.3}", us / 1000.0)
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<28} {:<11} {:<36} {:>9} {:>9} {:>9} {:>9}",
        "workload", "mode", "tool host", "p50 ms", "p95 ms", "p99 ms", "max ms"
    );
    for r in rows {
        let lead = format!("{:<28} {:<11} {:<36}", r.workload, r.mode, r.host);
        match &r.value {
            Value::Latency(s) => println!(
                "{lead} {:>9} {:>9} {:>9} {:>9}{}",
                ms(s.p50_us),
                ms(s.p95_us),
                ms(s.p99_us),
                ms(s.max_us),
                s.warm_share
                    .map(|w| format!("   warm {:.0}%", w * 100.0))
                    .unwrap_or_default()
            ),
            Value::Throughput { per_second, .. } => {
                println!("{lead} {:>9.0} executions/s", per_second)
            }
            Value::Memory {
                sandboxes,
                per_sandbox_bytes,
                ..
            } => println!(
                "{lead} {:>9.2} MiB RSS per sandbox ({sandboxes} alive)",
                *per_sandbox_bytes as f64 / (1 << 20) as f64
            ),
        }
    }
}
