//! The attack corpus (`tests/attacks/*.js`): hostile scripts run through
//! the real sandbox and gateway as an operator-mode identity against the
//! Proxmox backend (curated tools) and a simulated cluster in this process,
//! behind a counting backend. Each script says in its header what it must
//! end with and how many requests the backend may see:
//!
//! ```text
//! // expect: LimitExceeded wall_time_ms   (an error kind, optionally the limit; or `ok`)
//! // backend: 0                           (most backend calls allowed)
//! // result: "refused"                    (with `ok`: the exact JSON result)
//! ```
//!
//! A script with `// plan: apply` attacks an approved plan: it runs once
//! in plan mode (nothing sent), the plan it files is approved by another
//! person, and then the script applies it; the headers judge that apply.
//! `// apply-source: broken` applies it with a script that does not
//! compile; `// applied: N` is how many of its changes may be made;
//! `// plan-after: approved` (or `used`) what the plan must be after.
//!
//! Every script runs; the test fails listing every one that broke its
//! header, and the audit log must verify afterwards.
//!
//! Each script is also judged by what it cost the host, not only by its
//! outcome: peak resident memory beyond the guest's own (reset before each
//! script through `/proc/self/clear_refs`, which is why the corpus is one
//! test), wall time past the limit, the answer's size, and how much the
//! audit log grew.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use airlock::demo;
use airlock_catalog::ToolSpec;
use airlock_gateway::{
    approval::Status,
    audit,
    backend::TaskEnd,
    config::RateConfig,
    decision::Decider,
    gateway::PlanFiled,
    plan::Recorder,
    plan_apply::{Applying, PlanRun},
    policy::{Grant, PolicyConfig},
    Backend, BackendError, Caller, Gateway, GatewayConfig, Mode, Reply,
};
use airlock_proxmox::backend::ProxmoxBackend;
use airlock_sandbox::{Limits, Sandbox, SandboxConfig};
use airlock_sim::{Role, SimConfig, Simulator};
use airlock_state::Place;
use async_trait::async_trait;
use serde_json::Value;

/// The Proxmox backend, counting the calls that reach it.
struct Counting {
    inner: ProxmoxBackend,
    calls: AtomicUsize,
}

#[async_trait]
impl Backend for Counting {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn tools(&self) -> Vec<ToolSpec> {
        self.inner.tools()
    }
    fn planned(&self, tool: &ToolSpec, args: &Value, token: &str) -> Value {
        self.inner.planned(tool, args, token)
    }
    fn planned_read(&self, tool: &ToolSpec, args: &Value) -> Value {
        self.inner.planned_read(tool, args)
    }
    fn reads_task(&self, tool: &ToolSpec) -> bool {
        self.inner.reads_task(tool)
    }
    fn task_end(&self, tool: &ToolSpec, value: &Value) -> Option<TaskEnd> {
        self.inner.task_end(tool, value)
    }
    async fn call(&self, c: &Caller, t: &ToolSpec, args: Value) -> Result<Reply, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.call(c, t, args).await
    }
}

/// Host memory a script may add on top of the guest's linear memory.
const HOST_MARGIN: u64 = 48 << 20;
/// Time past `wall_time_ms` an execution may take to end.
const LATE: Duration = Duration::from_millis(300);
/// An answer's size beyond `result_bytes` and `log_bytes` (the trace of at
/// most 50 calls, stats, an error).
const ANSWER_MARGIN: usize = 64 << 10;
/// The longest audit line any call may write.
const AUDIT_LINE_MAX: usize = 4 << 10;

fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    kib << 10
}

struct Expect {
    kind: String,
    limit: Option<String>,
    backend: usize,
    result: Option<Value>,
    /// Plan it, have it approved, then apply it.
    plan: bool,
    /// Apply with a script that does not compile.
    broken_apply: bool,
    applied: Option<usize>,
    plan_after: Option<String>,
    /// Run it once first, then approve what it asked as this name.
    approve_by: Option<String>,
    /// Run it as a durable execution: each time it waits, another person
    /// approves what it asked, and it goes on by replay.
    durable: bool,
}

fn header(path: &std::path::Path, text: &str) -> Expect {
    let field = |name: &str| {
        text.lines()
            .take_while(|l| l.starts_with("//"))
            .find_map(|l| {
                l.strip_prefix(&format!("// {name}:"))
                    .map(|v| v.trim().to_string())
            })
    };
    let expect = field("expect").unwrap_or_else(|| panic!("{}: no `// expect:`", path.display()));
    let mut words = expect.split_whitespace();
    Expect {
        kind: words.next().unwrap_or("ok").to_string(),
        limit: words.next().map(str::to_string),
        backend: field("backend").map(|b| b.parse().unwrap()).unwrap_or(0),
        result: field("result").map(|r| serde_json::from_str(&r).unwrap()),
        plan: field("plan").as_deref() == Some("apply"),
        broken_apply: field("apply-source").as_deref() == Some("broken"),
        applied: field("applied").map(|n| n.parse().unwrap()),
        plan_after: field("plan-after"),
        approve_by: field("approve-by"),
        durable: field("durable").as_deref() == Some("approve"),
    }
}

/// Denies what earlier attacks left waiting (an identity has at most
/// `max_open_per_identity` requests open).
fn clear_pending(gateway: &Gateway) -> Result<(), String> {
    let now = gateway.now_ms();
    for r in gateway
        .approvals()
        .list(now, false)
        .map_err(|e| e.to_string())?
    {
        if r.status == Status::Pending {
            let _ = gateway.decide(&r.id, &Decider::cli("corpus-operator"), Status::Denied);
        }
    }
    Ok(())
}

/// Runs `text` once as `identity`, then approves every request it filed
/// as `by`; how many approvals the store took.
async fn approved_by(
    gateway: &Arc<Gateway>,
    sandbox: &Sandbox,
    limits: &Limits,
    identity: &str,
    text: &str,
    by: &str,
) -> Result<usize, String> {
    clear_pending(gateway)?;
    let host = airlock::wiring::ScriptTools {
        gateway: gateway.clone(),
        caller: Caller::new(identity),
        runbooks: None,
        budget: None,
        durable: false,
    };
    sandbox.execute(text, limits, &host).await;
    let now = gateway.now_ms();
    let pending: Vec<String> = gateway
        .approvals()
        .list(now, false)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|r| r.status == Status::Pending)
        .map(|r| r.id)
        .collect();
    if pending.is_empty() {
        return Err("the first run filed no request to approve".into());
    }
    Ok(pending
        .iter()
        .filter(|id| {
            gateway
                .decide(id, &Decider::cli(by), Status::Approved)
                .is_ok()
        })
        .count())
}

/// Runs `text` in plan mode as `identity`, has another person approve
/// the plan it files, and opens it for applying: the caller to apply it
/// as.
async fn approved_plan(
    gateway: &Arc<Gateway>,
    sandbox: &Sandbox,
    limits: &Limits,
    identity: &str,
    text: &str,
) -> Result<(Caller, Arc<Applying>), String> {
    clear_pending(gateway)?;
    let recorder = Arc::new(Recorder::new().unwrap());
    let recording = Caller {
        plan: Some(PlanRun::Record(recorder.clone())),
        ..Caller::new(identity)
    };
    let host = airlock::wiring::ScriptTools {
        gateway: gateway.clone(),
        caller: recording.clone(),
        runbooks: None,
        budget: None,
        durable: false,
    };
    let outcome = sandbox.execute(text, limits, &host).await;
    if let Some(e) = outcome.error() {
        return Err(format!("planning it failed: {e:?}"));
    }
    let id = match gateway.file_plan(&recording, &recorder) {
        Ok(PlanFiled::Filed(r)) => r.id,
        other => return Err(format!("no plan was filed: {other:?}")),
    };
    gateway
        .decide(&id, &Decider::cli("corpus-operator"), Status::Approved)
        .map_err(|e| e.to_string())?;
    let caller = Caller::new(identity);
    let applying = gateway.open_plan(&caller, &id).map_err(|e| e.to_string())?;
    Ok((
        Caller {
            plan: Some(PlanRun::Apply(applying.clone())),
            ..caller
        },
        applying,
    ))
}

/// Most times a durable attack waits and goes on.
const DURABLE_ROUNDS: u32 = 5;

/// Runs `text` journaled, as a durable execution: each time it waits,
/// another person approves every request it waits for, and it goes on by
/// replay in a fresh instance. The last run's outcome, and how many runs.
async fn durable_run(
    gateway: &Arc<Gateway>,
    sandbox: &Sandbox,
    limits: &Limits,
    host: &airlock::wiring::ScriptTools,
    text: &str,
) -> (airlock_sandbox::Outcome, u32) {
    let mut journal = airlock_sandbox::Journal::new();
    let mut runs = 0;
    loop {
        let o = sandbox
            .execute_journaled(text, limits, host, &mut journal)
            .await;
        runs += 1;
        let Err(airlock_sandbox::ExecError::Parked { waiting }) = &o.result else {
            return (o, runs);
        };
        if runs > DURABLE_ROUNDS {
            return (o, runs);
        }
        for w in waiting {
            if let Some(id) = w.details.get("request_id").and_then(Value::as_str) {
                let _ = gateway.decide(id, &Decider::cli("corpus-operator"), Status::Approved);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attack_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/attacks");
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "js"))
        .collect();
    scripts.sort();
    assert!(
        scripts.len() >= 86,
        "the corpus has {} scripts",
        scripts.len()
    );

    // The simulated cluster, answering at once; it stops when `sim` is
    // dropped, on every way out of this test.
    let sim_config = SimConfig::with_default_tokens(Duration::ZERO);
    let sim = Simulator::start(&sim_config).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let proxmox = demo::proxmox_section(&sim, &sim_config, &state.path().join("tokens")).unwrap();
    // The demo identity that acts with the simulator's operator token.
    let (identity, _, _) = demo::IDENTITIES
        .iter()
        .find(|(_, _, role)| *role == Role::Operator)
        .expect("a demo identity with the operator token");
    let config = GatewayConfig {
        policy: PolicyConfig {
            identities: [(
                identity.to_string(),
                Grant {
                    mode: Mode::Operator,
                    ..Grant::default()
                },
            )]
            .into(),
            ..PolicyConfig::default()
        },
        rate: RateConfig {
            calls_per_minute: 0,
            ..RateConfig::default()
        },
        ..GatewayConfig::default()
    };
    let backend = Arc::new(Counting {
        inner: ProxmoxBackend::new(&proxmox).await.unwrap(),
        calls: AtomicUsize::new(0),
    });
    let (gateway, _) = Gateway::new(
        config,
        vec![backend.clone() as Arc<dyn Backend>],
        &Place::in_dir(state.path()),
    )
    .unwrap();
    let gateway = Arc::new(gateway);
    let sandbox = Sandbox::new(SandboxConfig::default()).await.unwrap();
    let limits = Limits {
        wall_time_ms: 2_000,
        memory_bytes: 64 << 20,
        tool_calls: 50,
        ..Limits::default()
    };

    let mut broken = Vec::new();
    for path in &scripts {
        let mut text = std::fs::read_to_string(path).unwrap();
        let want = header(path, &text);
        let name = path.file_name().unwrap().to_string_lossy();
        let (caller, applying) = if want.plan {
            match approved_plan(&gateway, &sandbox, &limits, identity, &text).await {
                Ok((c, a)) => (c, Some(a)),
                Err(e) => {
                    broken.push(format!("{name}: {e}"));
                    continue;
                }
            }
        } else {
            (Caller::new(*identity), None)
        };
        if want.broken_apply {
            text.push_str("\n)(");
        }
        if let Some(by) = &want.approve_by {
            match approved_by(&gateway, &sandbox, &limits, identity, &text, by).await {
                Ok(0) => {}
                Ok(n) => broken.push(format!(
                    "{name}: {by} approved {n} request(s) of {identity}"
                )),
                Err(e) => broken.push(format!("{name}: {e}")),
            }
        }
        if want.durable {
            if let Err(e) = clear_pending(&gateway) {
                broken.push(format!("{name}: {e}"));
                continue;
            }
        }
        let before = backend.calls.load(Ordering::SeqCst);
        let host = airlock::wiring::ScriptTools {
            gateway: gateway.clone(),
            caller: caller.clone(),
            runbooks: None,
            budget: None,
            durable: want.durable,
        };
        let audit_before = std::fs::metadata(gateway.audit_path().unwrap())
            .unwrap()
            .len();
        std::fs::write("/proc/self/clear_refs", "5").expect("reset peak RSS");
        let rss_before = status_bytes("VmRSS:");
        let t0 = Instant::now();
        let (outcome, runs) = match want.durable {
            true => durable_run(&gateway, &sandbox, &limits, &host, &text).await,
            false => (sandbox.execute(&text, &limits, &host).await, 1),
        };
        let wall = t0.elapsed();
        let rss_growth = status_bytes("VmHWM:").saturating_sub(rss_before);
        let answer = serde_json::to_vec(&outcome).unwrap().len();
        let audit_text = std::fs::read(gateway.audit_path().unwrap()).unwrap();
        let added = &audit_text[audit_before as usize..];
        let seen = backend.calls.load(Ordering::SeqCst) - before;
        let error = outcome.error().map(|e| serde_json::to_value(e).unwrap());
        let kind = outcome.error().map(|e| e.kind()).unwrap_or("ok");
        let limit = error
            .as_ref()
            .and_then(|e| e.get("limit"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut problems = Vec::new();
        if kind != want.kind {
            problems.push(format!("ended {kind} {error:?}, expected {}", want.kind));
        }
        if want.durable && runs < 2 {
            problems.push("it never waited, so nothing of it was replayed".into());
        }
        if want.limit.is_some() && limit != want.limit {
            problems.push(format!("hit {limit:?}, expected {:?}", want.limit));
        }
        let said = error.as_ref().map(|e| e.to_string().len()).unwrap_or(0);
        if said > 8 << 10 {
            problems.push(format!(
                "an error of {said} bytes reaches the agent's context"
            ));
        }
        if seen > want.backend {
            problems.push(format!(
                "the backend saw {seen} calls, at most {} allowed",
                want.backend
            ));
        }
        let guest = outcome.stats.peak_memory_bytes;
        if rss_growth > guest + HOST_MARGIN {
            problems.push(format!(
                "host RSS grew {} MiB with a guest of {} MiB",
                rss_growth >> 20,
                guest >> 20
            ));
        }
        if wall > limits.wall_time() * runs + LATE {
            problems.push(format!(
                "took {wall:?} with wall_time_ms = {}",
                limits.wall_time_ms
            ));
        }
        if answer > (limits.result_bytes + limits.log_bytes) as usize + ANSWER_MARGIN {
            problems.push(format!("an answer of {answer} bytes"));
        }
        let lines = added.split(|b| *b == b'\n').filter(|l| !l.is_empty());
        let (mut n_lines, mut longest) = (0usize, 0usize);
        for l in lines {
            n_lines += 1;
            longest = longest.max(l.len());
        }
        // A durable run's approvals add a request and a decision line
        // to each change's call and result lines.
        let per_call = if want.durable { 4 } else { 2 };
        if longest > AUDIT_LINE_MAX || n_lines > per_call * outcome.stats.tool_calls as usize {
            problems.push(format!(
                "the audit grew by {} bytes in {n_lines} lines (longest {longest}) for {} calls",
                added.len(),
                outcome.stats.tool_calls
            ));
        }
        eprintln!(
            "{name}: {kind}, {runs} run(s), host +{} MiB (guest {} MiB), {} ms, answer {answer} B, audit +{} B",
            rss_growth >> 20,
            guest >> 20,
            wall.as_millis(),
            added.len()
        );
        if let (Some(r), "ok") = (&want.result, kind) {
            if outcome.value() != r {
                problems.push(format!("result {}, expected {r}", outcome.value()));
            }
        }
        if let Some(plan) = &applying {
            gateway.plan_finished(&caller, plan);
            let made = plan.applied().len();
            if want.applied.is_some_and(|n| made > n) {
                problems.push(format!(
                    "{made} of the plan's changes were made, at most {:?} allowed",
                    want.applied
                ));
            }
            let status = gateway.approvals().get(&plan.id).unwrap().status;
            if let Some(after) = &want.plan_after {
                if status.as_str() != after {
                    problems.push(format!(
                        "the plan is {} afterwards, expected {after}",
                        status.as_str()
                    ));
                }
            }
        }
        if !problems.is_empty() {
            broken.push(format!("{name}: {}", problems.join("; ")));
        }
    }
    assert!(
        broken.is_empty(),
        "{} of {} attacks broke their header:\n{}",
        broken.len(),
        scripts.len(),
        broken.join("\n")
    );
    let v = audit::verify(gateway.audit_path().unwrap()).unwrap();
    assert!(v.ok(), "the audit log verifies after the corpus: {v:?}");
    drop(sim);
}
