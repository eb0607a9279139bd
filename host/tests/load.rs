//! A bounded load test on loopback: the simulated Proxmox VE cluster in
//! this process, `airlock serve --http` as a child process pointed at it,
//! and many MCP clients (rmcp, streamable HTTP, several enrolled
//! identities) running a fixed mix of scripts at once.
//!
//! What must hold: every request succeeds with the expected value, or fails
//! with exactly the limit or policy error it was written to hit; no tool
//! call is lost or duplicated — the simulator answered exactly the requests
//! the audit log says were let through, per request and identity, and the
//! clients' traces agree; the audit chain verifies; the server's resident
//! memory outside the sandbox's instance slots stays flat between a
//! checkpoint after warm-up and the end.
//! Latency percentiles and memory are printed (`--nocapture`), not
//! asserted.

mod common;

use std::{
    collections::{BTreeMap, HashMap},
    ffi::OsString,
    sync::Arc,
    time::{Duration, Instant},
};

use airlock::demo;
use airlock_catalog::digest::sha256_json;
use airlock_gateway::audit;
use airlock_proxmox::{backend::build_request, curated, tiers::TierRules};
use airlock_sim::{
    pve::cluster::{Kind, Power},
    Simulator,
};
use common::{enroll, Server};
use rmcp::{model::CallToolRequestParams, service::RunningService, RoleClient};
use serde_json::{json, Value};

/// Concurrent MCP clients; each keeps one session for the whole run.
const CLIENTS: usize = 24;
/// Rounds before the memory checkpoint; in a round every client walks
/// its whole schedule once.
const WARMUP_ROUNDS: usize = 2;
/// Rounds after it (latency is measured over these).
const MAIN_ROUNDS: usize = 3;
/// Clients that also run one CPU loop each in the main phase: few, since
/// each burns a core for the whole wall-clock budget.
const SPINNERS: usize = 2;

/// The server's limits for this run (set through its real flags).
const TOOL_CALLS: u64 = 20;
const MEMORY_BYTES: u64 = 64 << 20;
const WALL_TIME_MS: u64 = 3_000;

/// Largest growth allowed, between the checkpoint after warm-up and the
/// end, of the server's resident memory outside the sandbox's instance
/// slots (heap, stacks, code: where a leak of sessions, audit state,
/// traces or connections would show).
///
/// Measured on 2 cores (release build), same mix: 56–58 MiB after one
/// warm-up round, then +0.4 to +1 MiB per round for the first few rounds
/// (1.9–2.7 MiB over the three main rounds) and flat from then on (59.3 →
/// 59.5 MiB over the last ten of seventeen rounds, ~30,000 tool calls).
/// Later builds grew more in the rounds right after one warm-up round
/// (4.2–6.3 MiB over the main rounds, once 8.85 MiB in a full-suite run);
/// after two (issue 50's session) 2.2 and 3.5 MiB, so the checkpoint
/// follows two. 8 MiB is over twice the most seen since; a leak of
/// 3 KiB per tool call (~3,600 calls after the checkpoint) or 14 KiB
/// per request exceeds it.
///
/// The instance slots themselves are reported, not bounded here: a slot
/// keeps up to 16 MiB resident between uses by design, so their total
/// rises in 16 MiB steps as more of the pool's slots get used (to ~270 MiB
/// at 17 slots in that run, where it stayed) — growth, but no leak.
const HOST_GROWTH_BOUND_KIB: u64 = 8 << 10;

/// Identities the clients act as, in turn: two that may read and write
/// (never used for writes here), two read-only.
const IDENTITIES: [&str; 4] = ["alice", "olga", "rita", "local"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Job {
    /// Node list and cluster resources together, then every node's VM
    /// list with Promise.all.
    Inventory,
    /// Every node's VM and container lists, then the status of every
    /// running VM, all in parallel.
    Guests,
    /// Every node's status in parallel.
    Nodes,
    /// The MCP `search` tool.
    Search,
    /// The MCP `get_schema` tool.
    Schema,
    /// Read-only identity: a read, then a VM start → policy_denied.
    Denied,
    /// Sequential calls, one more than `--tool-calls` allows.
    TooManyCalls,
    /// Allocates until `--memory-bytes` stops it.
    TooMuchMemory,
    /// A CPU loop until `--wall-time-ms` stops it.
    Spin,
}

use Job::*;

/// Each client walks its schedule from its own offset.
const READ_WRITE: [Job; 12] = [
    Inventory,
    Guests,
    Search,
    Nodes,
    TooManyCalls,
    Inventory,
    Schema,
    Guests,
    TooMuchMemory,
    Nodes,
    Inventory,
    Guests,
];
const READ_ONLY: [Job; 12] = [
    Inventory, Guests, Search, Nodes, Denied, Inventory, Schema, Guests, Denied, Nodes, Inventory,
    Guests,
];

fn script(job: Job, nodes: &[String]) -> String {
    let nodes = serde_json::to_string(nodes).unwrap();
    match job {
        Inventory => r#"
const [nodes, resources] = await Promise.all([tools.node_list({}), tools.cluster_resources({type: "vm"})]);
const names = nodes.map(n => n.node).sort();
const vms = await Promise.all(names.map(node => tools.vm_list({node})));
const ids = list => list.map(x => x.vmid).sort((a, b) => a - b);
({nodes: names, guests: ids(resources), vms: vms.map(ids)})"#
            .to_string(),
        Guests => r#"
const names = (await tools.node_list({})).map(n => n.node).sort();
const lists = await Promise.all(names.map(node => Promise.all([tools.vm_list({node}), tools.ct_list({node})])));
const running = lists.flatMap(([vms], i) => vms.filter(v => v.status === "running").map(v => ({node: names[i], vmid: v.vmid})));
const status = await Promise.all(running.map(v => tools.vm_status(v)));
({containers: lists.map(([, cts]) => cts.length), running: status.map(s => [s.vmid, s.status]).sort((a, b) => a[0] - b[0])})"#
            .to_string(),
        Nodes => format!(
            "const s = await Promise.all({nodes}.map(node => tools.node_status({{node}})));\ns.map(x => x.cpuinfo.cpus)"
        ),
        Denied => r#"
const n = (await tools.node_list({})).length;
await tools.vm_start({node: "pve1", vmid: 103});
n"#
        .to_string(),
        TooManyCalls => format!(
            "for (let i = 0; i <= {TOOL_CALLS}; i++) await tools.node_version({{node: \"pve1\"}});\n\"unreachable\""
        ),
        // Doubling a string reaches the cap in a few fast copies.
        TooMuchMemory => {
            "let s = \"x\".repeat(1 << 20); const keep = []; while (true) { s = s + s; keep.push(s) } keep.length".into()
        }
        Spin => "let i = 0; while (true) { i++ } i".into(),
        Search | Schema => unreachable!("not a script"),
    }
}

/// What the simulated cluster holds, read from the simulator itself.
struct ClusterView {
    nodes: Vec<String>,
    cpus: Vec<u64>,
    /// vmid, node, kind, running
    guests: Vec<(u32, String, Kind, bool)>,
}

async fn cluster_view(sim: &Simulator) -> ClusterView {
    sim.with_cluster(|c| {
        let mut nodes: Vec<_> = c.nodes.iter().map(|n| (n.name.clone(), n.cpus)).collect();
        nodes.sort();
        ClusterView {
            cpus: nodes.iter().map(|n| n.1).collect(),
            nodes: nodes.into_iter().map(|n| n.0).collect(),
            guests: c
                .guests
                .values()
                .map(|g| (g.vmid, g.node.clone(), g.kind, g.power == Power::Running))
                .collect(),
        }
    })
    .await
}

impl ClusterView {
    /// What a script returns, or the error it must fail with (as the
    /// `error` object of the execute result; `used` is checked apart).
    fn expected(&self, job: Job) -> Result<Value, Value> {
        let mut all: Vec<u32> = self.guests.iter().map(|g| g.0).collect();
        all.sort();
        let qemu_on = |node: &str| -> Vec<u32> {
            self.guests
                .iter()
                .filter(|g| g.1 == node && g.2 == Kind::Qemu)
                .map(|g| g.0)
                .collect()
        };
        match job {
            Inventory => Ok(json!({
                "nodes": self.nodes,
                "guests": all,
                "vms": self.nodes.iter().map(|n| qemu_on(n)).collect::<Vec<_>>(),
            })),
            Guests => Ok(json!({
                "containers": self.nodes.iter().map(|n| self.guests.iter().filter(|g| &g.1 == n && g.2 == Kind::Lxc).count()).collect::<Vec<_>>(),
                "running": self.guests.iter().filter(|g| g.2 == Kind::Qemu && g.3).map(|g| json!([g.0, "running"])).collect::<Vec<_>>(),
            })),
            Nodes => Ok(json!(self.cpus)),
            Denied => Err(json!({"kind": "PolicyDenied", "tool": "vm_start"})),
            TooManyCalls => {
                Err(json!({"kind": "LimitExceeded", "limit": "tool_calls", "value": TOOL_CALLS}))
            }
            TooMuchMemory => Err(
                json!({"kind": "LimitExceeded", "limit": "memory_bytes", "value": MEMORY_BYTES}),
            ),
            Spin => Err(
                json!({"kind": "LimitExceeded", "limit": "wall_time_ms", "value": WALL_TIME_MS}),
            ),
            Search | Schema => unreachable!("not a script"),
        }
    }

    /// Every tool call the scripts can make, keyed by (tool, hash of the
    /// arguments) as the audit log records them, with the request the
    /// Proxmox backend sends for it, as the simulator records requests:
    /// (method, `path?sorted&params`).
    fn requests_by_call(&self) -> HashMap<(String, String), (String, String)> {
        let routes: HashMap<String, _> =
            curated::tools(&TierRules::defaults(), &Default::default(), "pve")
                .into_iter()
                .map(|(spec, route)| (spec.name, route))
                .collect();
        let mut calls = vec![
            ("node_list", json!({})),
            ("cluster_resources", json!({"type": "vm"})),
        ];
        for node in &self.nodes {
            for tool in ["vm_list", "ct_list", "node_status", "node_version"] {
                calls.push((tool, json!({"node": node})));
            }
        }
        for (vmid, node, kind, _) in &self.guests {
            if *kind == Kind::Qemu {
                calls.push(("vm_status", json!({"node": node, "vmid": vmid})));
            }
        }
        calls
            .into_iter()
            .map(|(tool, args)| {
                let request = build_request(&routes[tool], &args).unwrap();
                let mut params: Vec<String> = request
                    .params
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                params.sort();
                (
                    (tool.to_string(), sha256_json(&args)),
                    (
                        request.method.as_str().to_string(),
                        format!("{}?{}", request.path, params.join("&")),
                    ),
                )
            })
            .collect()
    }
}

/// One finished request, as its client saw it.
struct Done {
    client: usize,
    job: Job,
    main: bool,
    latency: Duration,
    /// `Ok` or what was wrong with the answer.
    verdict: Result<(), String>,
    /// Tool calls in the execute's trace: (tool, status).
    trace: Vec<(String, String)>,
    /// The error kind an execute ended with, "ok" when it succeeded.
    outcome: String,
}

type Client = RunningService<RoleClient, ()>;

async fn run_job(
    client: &Client,
    job: Job,
    view: &ClusterView,
) -> (Result<(), String>, Vec<(String, String)>, String) {
    let (tool, args) = match job {
        Search => (
            "search",
            json!({"query": "list virtual machines on a node"}),
        ),
        Schema => ("get_schema", json!({"names": ["vm_list", "node_status"]})),
        _ => (
            "execute",
            json!({"script": script(job, &view.nodes), "trace": true}),
        ),
    };
    let Value::Object(args) = args else {
        unreachable!()
    };
    let reply = match client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
    {
        Ok(r) => r,
        Err(e) => {
            return (
                Err(format!("the MCP request failed: {e}")),
                vec![],
                String::new(),
            )
        }
    };
    let Some(s) = reply.structured_content.clone() else {
        return (
            Err(format!("no structured content: {}", common::text(&reply))),
            vec![],
            String::new(),
        );
    };
    match job {
        Search => {
            let found = s["hits"]
                .as_array()
                .is_some_and(|h| h.iter().any(|h| h["name"] == "vm_list"));
            let verdict = (found && reply.is_error != Some(true))
                .then_some(())
                .ok_or_else(|| format!("search did not find vm_list: {s}"));
            return (verdict, vec![], String::new());
        }
        Schema => {
            let names: Vec<&str> = s["schemas"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|x| x["typescript"].is_string())
                        .filter_map(|x| x["name"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            let verdict = (names == ["vm_list", "node_status"])
                .then_some(())
                .ok_or_else(|| format!("get_schema answered {s}"));
            return (verdict, vec![], String::new());
        }
        _ => {}
    }
    let trace: Vec<(String, String)> = s["trace"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    (
                        c["tool"].as_str().unwrap_or("?").to_string(),
                        c["status"].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let outcome = s["error"]["kind"].as_str().unwrap_or("ok").to_string();
    let verdict = match (view.expected(job), s.get("error")) {
        (Ok(want), None) if s["result"] == want => Ok(()),
        (Ok(want), _) => Err(format!("expected {want}, got {s}")),
        (Err(want), Some(got)) => {
            let fields_match = want.as_object().unwrap().iter().all(|(k, v)| &got[k] == v);
            // The amount used: exactly one call too many; more memory or
            // time than allowed.
            let used = got["used"].as_u64().unwrap_or(0);
            let used_ok = match job {
                TooManyCalls => used == TOOL_CALLS + 1,
                TooMuchMemory => used > MEMORY_BYTES,
                Spin => used >= WALL_TIME_MS,
                _ => true,
            };
            if fields_match && used_ok && reply.is_error == Some(true) {
                Ok(())
            } else {
                Err(format!("expected the error {want}, got {s}"))
            }
        }
        (Err(want), None) => Err(format!("expected the error {want}, got {s}")),
    };
    (verdict, trace, outcome)
}

/// The server's resident memory, in KiB, split in two: the sandbox's
/// instance slots, and the rest.
#[derive(Clone, Copy, Debug)]
struct Memory {
    total: u64,
    /// Pages resident in the pooling allocator's instance slots. A slot
    /// keeps up to 16 MiB of its linear memory resident between uses
    /// (`KEEP_RESIDENT` in sandbox/src/engine.rs), so this grows with the
    /// number of slots ever used — by design, bounded by the slot count —
    /// and says nothing about leaks.
    slots: u64,
}

impl Memory {
    /// Everything outside the instance slots: heap, stacks, code.
    fn host(&self) -> u64 {
        self.total - self.slots
    }
}

/// Reads /proc/PID/smaps. A slot is 4 GiB of address space: the pages a
/// guest may use, then the rest PROT_NONE; with a memory limit far below
/// 4 GiB every slot ends in an anonymous PROT_NONE mapping of more than
/// 1 GiB (unused neighbours merge into one), and nothing else in the
/// process maps that much. Such a mapping and the accessible mappings
/// directly before it (up to the previous PROT_NONE one: the slot's
/// memory, or the guard in front of the first slot) are slot memory.
fn memory(pid: u32) -> Memory {
    struct Vma {
        start: u64,
        end: u64,
        none: bool,
        anonymous: bool,
        rss: u64,
    }
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .unwrap_or_else(|e| panic!("cannot read the server's /proc smaps: {e}"));
    let mut vmas: Vec<Vma> = Vec::new();
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let Some((start, end)) = fields.first().and_then(|f| f.split_once('-')) {
            // `start-end perms offset dev inode [path]`
            if let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
            {
                vmas.push(Vma {
                    start,
                    end,
                    none: fields[1] == "---p",
                    anonymous: fields.len() == 5,
                    rss: 0,
                });
                continue;
            }
        }
        if line.starts_with("Rss:") {
            vmas.last_mut().expect("Rss follows a mapping").rss =
                fields[1].parse().expect("Rss in kB");
        }
    }
    let total = vmas.iter().map(|v| v.rss).sum();
    let mut slots = 0;
    for (i, v) in vmas.iter().enumerate() {
        if !(v.none && v.anonymous && v.end - v.start > 1 << 30) {
            continue;
        }
        slots += v.rss;
        let mut next = v.start;
        for before in vmas[..i].iter().rev() {
            if before.end != next || before.none {
                break;
            }
            slots += before.rss;
            next = before.start;
        }
    }
    Memory { total, slots }
}

/// The server's resident memory in KiB, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read the server's /proc status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// One round: every client walks its schedule once (client `c` from step
/// `c`), all at once; in the first main round the first `SPINNERS`
/// clients also run a CPU loop. Returns every request.
async fn phase(
    clients: &[Arc<Client>],
    round: usize,
    main: bool,
    view: &Arc<ClusterView>,
    pid: u32,
    peak_rss: &Arc<std::sync::atomic::AtomicU64>,
) -> Vec<Done> {
    let spinners = if round == WARMUP_ROUNDS { SPINNERS } else { 0 };
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let view = view.clone();
        let peak_rss = peak_rss.clone();
        let schedule = if IDENTITIES[c % IDENTITIES.len()] == "rita"
            || IDENTITIES[c % IDENTITIES.len()] == "local"
        {
            READ_ONLY
        } else {
            READ_WRITE
        };
        tasks.push(tokio::spawn(async move {
            let steps = schedule.len();
            let mut jobs: Vec<Job> = (0..steps).map(|k| schedule[(c + k) % steps]).collect();
            if c < spinners {
                jobs.insert(steps / 2, Spin);
            }
            let mut done = Vec::new();
            for job in jobs {
                let t0 = Instant::now();
                let (verdict, trace, outcome) = run_job(&client, job, &view).await;
                done.push(Done {
                    client: c,
                    job,
                    main,
                    latency: t0.elapsed(),
                    verdict,
                    trace,
                    outcome,
                });
                if main {
                    peak_rss.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                }
            }
            done
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("a client task panicked"));
    }
    all
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_lose_and_duplicate_nothing_and_memory_stays_flat() {
    // The simulated cluster in this process; tasks are not used (no writes).
    let (sim, sim_config) = demo::start(Duration::from_millis(20), 0).await.unwrap();
    let view = Arc::new(cluster_view(&sim).await);
    let dir = tempfile::tempdir().unwrap();
    let proxmox = demo::proxmox_section(&sim, &sim_config, &dir.path().join("tokens")).unwrap();
    // The demo's configuration for the simulator, with the gateway's
    // per-identity call rate switched off: ~1,800 tool calls per identity
    // in about ten seconds would trip the default 600 a minute.
    let mut config = demo::config_toml(&proxmox, dir.path());
    config.push_str("\n[rate]\ncalls_per_minute = 0\n");
    let config_path = dir.path().join("airlock.toml");
    std::fs::write(&config_path, config).unwrap();
    let audit_path = dir.path().join("audit.jsonl");
    let enrollment = dir.path().join(common::ENROLLMENT);
    let keys: Vec<String> = IDENTITIES
        .iter()
        .map(|identity| enroll(&enrollment, identity))
        .collect();
    let mut args: Vec<OsString> = vec!["--config".into(), config_path.into()];
    args.extend(
        [
            "serve",
            "--http",
            "127.0.0.1:0",
            // Six clients per identity send ~300 MCP requests in about ten
            // seconds; the per-identity HTTP rate limit is off so that
            // legitimate load is not refused.
            "--requests-per-minute",
            "0",
        ]
        .map(OsString::from),
    );
    args.push("--enrollment".into());
    args.push(enrollment.into());
    for (flag, value) in [
        ("--tool-calls", TOOL_CALLS),
        ("--memory-bytes", MEMORY_BYTES),
        ("--wall-time-ms", WALL_TIME_MS),
    ] {
        args.push(flag.into());
        args.push(value.to_string().into());
    }
    // `spawn` blocks until the server is up; keep the simulator's runtime
    // threads free meanwhile.
    let mut server = tokio::task::spawn_blocking(move || Server::spawn(dir, &args))
        .await
        .unwrap();
    let pid = server.child.id();
    let mem_start = memory(pid);

    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        clients.push(Arc::new(server.connect(&keys[c % keys.len()]).await));
    }
    let peak_rss = Arc::new(std::sync::atomic::AtomicU64::new(0));

    let mut done = Vec::new();
    let mut rss_rounds = Vec::new();
    let t0 = Instant::now();
    for round in 0..WARMUP_ROUNDS {
        done.extend(phase(&clients, round, false, &view, pid, &peak_rss).await);
        rss_rounds.push(memory(pid));
    }
    let warmup_time = t0.elapsed();
    let mem_warm = *rss_rounds.last().unwrap();
    let t1 = Instant::now();
    for round in WARMUP_ROUNDS..WARMUP_ROUNDS + MAIN_ROUNDS {
        done.extend(phase(&clients, round, true, &view, pid, &peak_rss).await);
        rss_rounds.push(memory(pid));
    }
    let main_time = t1.elapsed();
    let mem_end = *rss_rounds.last().unwrap();
    assert!(server.is_running(), "the server exited during the run");
    for c in clients {
        Arc::into_inner(c).unwrap().cancel().await.unwrap();
    }

    // Every request got the answer it was written for.
    let failures: Vec<String> = done
        .iter()
        .filter_map(|d| {
            d.verdict.as_ref().err().map(|e| {
                format!(
                    "client {} ({}) {:?}: {e}",
                    d.client,
                    IDENTITIES[d.client % 4],
                    d.job
                )
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} requests went wrong; the first:\n{}",
        failures.len(),
        done.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut per_job: BTreeMap<Job, usize> = BTreeMap::new();
    for d in &done {
        *per_job.entry(d.job).or_default() += 1;
    }
    let executes: Vec<&Done> = done
        .iter()
        .filter(|d| !matches!(d.job, Search | Schema))
        .collect();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for d in &executes {
        *outcomes.entry(d.outcome.clone()).or_default() += 1;
    }

    // The clients' traces: every call either succeeded or was the
    // deliberate denial.
    let mut traced_ok: BTreeMap<String, u64> = BTreeMap::new();
    let mut traced_denied = 0u64;
    for d in &executes {
        for (tool, status) in &d.trace {
            match status.as_str() {
                "ok" => *traced_ok.entry(tool.clone()).or_default() += 1,
                "policy_denied" if d.job == Denied && tool == "vm_start" => traced_denied += 1,
                other => panic!("client {} {:?}: call {tool} ended {other}", d.client, d.job),
            }
        }
    }

    // The audit log: the chain verifies; one start and one end per
    // execute; every call let through has exactly one result, and it is ok.
    let verdict = audit::verify(&audit_path).unwrap();
    assert!(verdict.ok(), "the audit chain is broken: {verdict:?}");
    let text = std::fs::read_to_string(&audit_path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(verdict.good_lines, lines.len() as u64);
    let events = |name: &'static str| lines.iter().filter(move |l| l["event"] == name);
    assert_eq!(
        events("execution_start").count(),
        executes.len(),
        "execution starts in the audit log"
    );
    let mut audit_outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for l in events("execution_end") {
        *audit_outcomes
            .entry(l["outcome"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(
        audit_outcomes, outcomes,
        "execution outcomes: audit log vs clients"
    );
    let mut allowed: HashMap<String, &Value> = HashMap::new();
    let mut denied = 0u64;
    for l in events("call") {
        let id = l["call"].as_str().unwrap().to_string();
        match l["decision"].as_str() {
            Some("allowed") => {
                assert!(allowed.insert(id, l).is_none(), "call id used twice: {l}")
            }
            Some("denied") if l["tool"] == "vm_start" => denied += 1,
            other => panic!("unexpected decision {other:?}: {l}"),
        }
    }
    let mut results: HashMap<String, u64> = HashMap::new();
    for l in events("call_result") {
        assert_eq!(l["status"], "ok", "a backend call failed: {l}");
        *results
            .entry(l["call"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    for id in allowed.keys() {
        assert_eq!(results.get(id), Some(&1), "results recorded for call {id}");
    }
    assert_eq!(
        results.len(),
        allowed.len(),
        "results for calls that were never let through"
    );
    assert_eq!(denied, per_job.get(&Denied).copied().unwrap_or(0) as u64);
    assert_eq!(traced_denied, denied, "denials: clients vs audit log");
    let mut audited_ok: BTreeMap<String, u64> = BTreeMap::new();
    for l in allowed.values() {
        *audited_ok
            .entry(l["tool"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(
        audited_ok, traced_ok,
        "calls per tool: audit log vs clients' traces"
    );

    // The simulator: exactly the requests the audit log let through, each
    // with the token of the identity that made it.
    let by_call = view.requests_by_call();
    let token_of: HashMap<&str, String> = demo::IDENTITIES
        .iter()
        .map(|(identity, _, role)| (*identity, sim_config.token(*role).unwrap().id.clone()))
        .collect();
    let mut expected: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for l in allowed.values() {
        let key = (
            l["tool"].as_str().unwrap().to_string(),
            l["args_sha256"].as_str().unwrap().to_string(),
        );
        let (method, path) = by_call
            .get(&key)
            .unwrap_or_else(|| panic!("a call no script makes: {l}"));
        let token = token_of[l["identity"].as_str().unwrap()].clone();
        *expected
            .entry((method.clone(), path.clone(), token))
            .or_default() += 1;
    }
    let mut answered: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let requests = sim.requests().await;
    for r in &requests {
        *answered.entry(r.clone()).or_default() += 1;
    }
    let differences: Vec<String> = expected
        .keys()
        .chain(answered.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| expected.get(*k) != answered.get(*k))
        .map(|k| {
            format!(
                "{k:?}: audit {:?}, simulator {:?}",
                expected.get(k),
                answered.get(k)
            )
        })
        .collect();
    assert!(
        differences.is_empty(),
        "simulator and audit log disagree:\n{}",
        differences.join("\n")
    );
    assert_eq!(requests.len() as u64, allowed.len() as u64);

    // Report.
    let mut latencies: Vec<Duration> = executes
        .iter()
        .filter(|d| d.main)
        .map(|d| d.latency)
        .collect();
    latencies.sort();
    let peak = peak_rss.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "load: {CLIENTS} clients, {} requests ({} executes) in {:.1} s warm-up + {:.1} s main",
        done.len(),
        executes.len(),
        warmup_time.as_secs_f64(),
        main_time.as_secs_f64()
    );
    eprintln!("load: requests per kind: {per_job:?}");
    eprintln!("load: execute outcomes: {outcomes:?}");
    eprintln!("load: tool calls: {} reached the simulator, {} audited as let through, {denied} denied; per tool {audited_ok:?}", requests.len(), allowed.len());
    eprintln!(
        "load: execute latency over {} main-phase executes: p50 {}, p95 {}, p99 {}, max {}",
        latencies.len(),
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 95.0)),
        ms(percentile(&latencies, 99.0)),
        ms(*latencies.last().unwrap())
    );
    let mib = |k: u64| format!("{:.1}", k as f64 / 1024.0);
    eprintln!(
        "load: server RSS after each round, MiB total = instance slots + the rest: {}",
        rss_rounds
            .iter()
            .map(|m| format!("{} = {} + {}", mib(m.total), mib(m.slots), mib(m.host())))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!(
        "load: server RSS at start {} MiB, after warm-up {} MiB, at the end {} MiB, peak {} MiB; outside the instance slots {} -> {} MiB",
        mib(mem_start.total),
        mib(mem_warm.total),
        mib(mem_end.total),
        mib(peak),
        mib(mem_warm.host()),
        mib(mem_end.host()),
    );
    assert!(
        mem_end.host() <= mem_warm.host() + HOST_GROWTH_BOUND_KIB,
        "the server's memory outside the instance slots grew by {} KiB over the main phase (bound {HOST_GROWTH_BOUND_KIB} KiB): {} KiB -> {} KiB",
        mem_end.host() - mem_warm.host(),
        mem_warm.host(),
        mem_end.host()
    );
}
