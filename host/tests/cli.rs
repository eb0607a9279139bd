//! The `airlock` binary as a user runs it: a real process, scripts from a
//! file or stdin, flags and environment, exit codes.

mod common;

use std::process::{Command, Output};

/// A state directory of the test's own, so no test touches the user's
/// approvals or audit log.
struct State(tempfile::TempDir);

impl State {
    fn new() -> Self {
        Self(tempfile::tempdir().unwrap())
    }

    fn path(&self) -> &std::path::Path {
        self.0.path()
    }

    /// The audit log of runs without a backend: the simulated cluster's
    /// state lives apart from a real cluster's, in `simulated/`.
    fn audit(&self) -> std::path::PathBuf {
        self.path().join("simulated").join("audit.jsonl")
    }

    /// Writes a config file in the state directory and returns its path.
    fn config(&self, text: &str) -> String {
        let p = self.path().join("airlock.toml");
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    fn run(&self, args: &[&str], stdin: &str) -> Output {
        run_in(self.path(), args, stdin, &[])
    }
}

fn airlock(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let state = State::new();
    run_in(state.path(), args, stdin, env)
}

fn run_in(state: &std::path::Path, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(args)
        .env("AIRLOCK_STATE_DIR", state)
        .env_remove("AIRLOCK_CONFIG")
        .env_remove("AIRLOCK_IDENTITY")
        .envs(env.iter().copied());
    common::run_with_stdin(&mut cmd, stdin)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn exec_reads_stdin_and_prints_the_result() {
    let out = airlock(&["exec", "-"], "const n = await tools.node_list({});\nconsole.log('nodes', n.length);\nn.map((x) => x.node)", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value, serde_json::json!(["pve1", "pve2", "pve3"]));
    let err = text(&out.stderr);
    assert!(err.contains("[log] nodes 3"), "{err}");
    assert!(err.contains("ok: 1 tool call"), "{err}");
    assert!(
        err.contains("no backend configured") && err.contains("simulated Proxmox VE cluster"),
        "says what answered: {err}"
    );
}

#[test]
fn json_output_carries_the_whole_outcome() {
    let out = airlock(
        &["exec", "--json", "-"],
        "await tools.vm_status({node: 'pve1', vmid: 100})",
        &[],
    );
    assert!(out.status.success());
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["result"]["ok"]["name"], "web-1");
    assert_eq!(outcome["trace"][0]["tool"], "vm_status");
    assert_eq!(outcome["stats"]["mode"], "fresh");
}

#[test]
fn fuel_means_one_thing_whichever_way_it_is_turned_on() {
    let state = State::new();
    // Metering alone: a budget of nothing is not meant; the script runs,
    // the fuel it used is reported, nothing stops it.
    let config = state.config("[sandbox]\nfuel_metering = true\n");
    let out = state.run(&["--config", &config, "exec", "--json", "-"], "1 + 1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["result"]["ok"], 2);
    assert!(
        outcome["stats"]["fuel_used"].as_u64().unwrap() > 0,
        "{outcome}"
    );
    // A budget turns metering on, even against fuel_metering = false.
    let config = state.config("[sandbox]\nfuel_metering = false\n[limits]\nfuel = 100000\n");
    let out = state.run(&["--config", &config, "exec", "-"], "while (true) {}");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("LimitExceeded") && err.contains("fuel"),
        "{err}"
    );
    // Neither: no metering, nothing reported.
    let out = state.run(&["exec", "--json", "-"], "1 + 1");
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(outcome["stats"]["fuel_used"].is_null(), "{outcome}");
}

#[test]
fn a_hit_limit_exits_1_and_names_it() {
    let script = "for (const n of ['pve1', 'pve2']) await tools.vm_list({node: n})";
    let out = airlock(&["exec", "--tool-calls", "1", "-"], script, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("LimitExceeded") && err.contains("tool_calls") && err.contains("used 2 of 1"),
        "{err}"
    );
    // The same limit from the environment.
    let out = airlock(&["exec", "-"], script, &[("AIRLOCK_TOOL_CALLS", "1")]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn script_errors_exit_1_with_position() {
    let out = airlock(&["exec", "-"], "const a = 1;\nconst = 2;", &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("SyntaxError at line 2"), "{err}");
}

#[test]
fn bad_settings_exit_2_naming_the_problem() {
    let out = airlock(&["exec", "--memory-bytes", "lots", "-"], "1", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("memory-bytes"));
    let out = airlock(&["exec", "--calls-in-flight", "0", "-"], "1", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("calls_in_flight"),
        "{}",
        text(&out.stderr)
    );
    let out = airlock(&["exec", "/nonexistent/script.js"], "", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/script.js"));
    // A range that makes approval impossible fails at start, not later.
    let state = State::new();
    let config = state.config("[approval]\nttl_secs = 0\n");
    let out = state.run(&["--config", &config, "exec", "-"], "1");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("approval.ttl_secs = 0"),
        "{}",
        text(&out.stderr)
    );
    // So does a backend no call may reach.
    let config = state.config("[rate]\nbackend_concurrency = 0\n");
    let out = state.run(&["--config", &config, "exec", "-"], "1");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("rate.backend_concurrency = 0"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn demo_runs_with_no_configuration() {
    let out = airlock(&["demo"], "", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["nodes_offline"], serde_json::json!([]));
    assert_eq!(value["running"], 10, "the simulated cluster runs 10 guests");
    let said = text(&out.stderr);
    assert!(said.contains("Simulated Proxmox VE cluster at https://127.0.0.1:"));
    // Then plan → one approval → apply, for every running guest on pve1.
    for step in [
        "(pending): 4 changes",
        "ct_shutdown [operate]",
        "approved: plan pl-",
        "4 of 4 changes applied",
        "plan_used: plan pl-",
    ] {
        assert!(said.contains(step), "{step}: {said}");
    }
    assert_eq!(said.matches("\"result\": \"planned\"").count(), 4, "{said}");
    // Then a runbook, approved once, drains pve2: three migrations.
    for step in [
        "drain_node version ",
        "approved by the demo, as operator",
        "\"left\": 0",
    ] {
        assert!(said.contains(step), "{step}: {said}");
    }
    // Four shutdowns of the plan, three migrations of the runbook.
    assert_eq!(said.matches("\"result\": \"OK\"").count(), 4 + 3, "{said}");
}

#[test]
fn the_first_start_says_what_it_compiles_and_the_second_loads_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let env = [("AIRLOCK_CACHE_DIR", cache.path().to_str().unwrap())];
    let first = airlock(&["exec", "-"], "1+1", &env);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let said = text(&first.stderr);
    assert!(
        said.contains("first start on this machine: compiling the JavaScript sandbox guest"),
        "{said}"
    );
    assert!(said.contains("compiled the sandbox guest"), "{said}");
    let cached = std::fs::read_dir(cache.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "cwasm")
        })
        .count();
    assert_eq!(cached, 1, "one compiled module in the cache");

    let second = airlock(&["exec", "-"], "1+1", &env);
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert!(
        !text(&second.stderr).contains("compiling"),
        "{}",
        text(&second.stderr)
    );
}

#[test]
fn empty_airlock_variables_count_as_unset() {
    // As an MCP client passes an optional setting nobody filled in.
    let env = [("AIRLOCK_CONFIG", ""), ("AIRLOCK_IDENTITY", "")];
    let out = airlock(&["exec", "-"], "(await tools.node_list({})).length", &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "3");
}

#[test]
fn a_script_calls_proxmox_and_collector_tools_side_by_side() {
    let script = "const [fleet, nodes] = await Promise.all([tools.quox_fleet_status({}), tools.node_list({})]);\n\
        let ssh;\n\
        try { await tools.quox_ssh_exec({host: 'db-1', command: 'uptime'}); } catch (e) { ssh = e.code; }\n\
        ({hosts: fleet.hosts.length, nodes: nodes.length, ssh})";
    let out = airlock(
        &["demo", "--collector", "--identity", "olga", "--json", "-"],
        script,
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // olga operates: the collector's ssh_exec is admin by default.
    assert_eq!(
        outcome["result"]["ok"],
        serde_json::json!({"hosts": 3, "nodes": 3, "ssh": "policy_denied"}),
        "{outcome}"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("Simulated QuoxCORE collector at http://127.0.0.1:"),
        "{err}"
    );
    assert!(
        !err.contains("quox-demo-"),
        "the service key is not logged: {err}"
    );
}

#[test]
fn bench_measures_every_workload_and_writes_json() {
    let state = State::new();
    let json = state.path().join("bench.json");
    let out = run_in(
        state.path(),
        &[
            "bench",
            "--runs",
            "3",
            "--alive",
            "4",
            "--modes",
            "fresh",
            "--json",
            json.to_str().unwrap(),
            "--svg",
            state.path().join("latency.svg").to_str().unwrap(),
        ],
        "",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    for w in [
        "one_plus_one",
        "one_call",
        "ten_sequential",
        "ten_parallel",
        "8_concurrent_one_call",
        "64_concurrent_one_call",
        "throughput_c64",
        "memory_alive",
        "fleet_report",
        "start_to_tools_list",
        "search",
    ] {
        assert!(names.contains(&w), "{w} missing from {names:?}");
    }
    for r in rows {
        // RSS may not grow for a handful of sandboxes (pooled memory stays
        // resident); times and rates always are positive.
        if r["workload"] == "memory_alive" {
            assert!(r["rss_during_bytes"].as_u64().unwrap() > 0, "{r}");
            continue;
        }
        let measured = ["p50_us", "per_second"]
            .iter()
            .filter_map(|k| r[*k].as_f64())
            .next()
            .unwrap_or(0.0);
        assert!(measured > 0.0, "{r}");
    }
    assert!(text(&out.stdout).contains("p50 ms"));
    let svg = std::fs::read_to_string(state.path().join("latency.svg")).unwrap();
    assert!(svg.contains("one_plus_one (fresh, echo)"));
}

#[test]
fn proxy_variables_are_ignored() {
    // A proxy that does not exist: were it used, every request would fail.
    let dead = "http://127.0.0.1:9";
    let env = [
        ("HTTPS_PROXY", dead),
        ("https_proxy", dead),
        ("HTTP_PROXY", dead),
        ("ALL_PROXY", dead),
    ];
    let out = airlock(&["demo", "--task-delay-ms", "1"], "", &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn demo_runs_other_scripts_and_identities() {
    let out = airlock(
        &[
            "demo",
            "--json",
            "--identity",
            "rita",
            "--task-delay-ms",
            "1",
            "-",
        ],
        "await tools.vm_start({node: 'pve1', vmid: 103})",
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let o = json_of(&out);
    assert_eq!(
        o["result"]["error"]["kind"], "PolicyDenied",
        "rita is read-only"
    );
    let out = airlock(
        &["demo", "--json", "--no-wait", "--identity", "alice", "-"],
        "await tools.vm_start({node: 'pve1', vmid: 103})",
        &[],
    );
    assert_eq!(
        json_of(&out)["result"]["error"]["kind"],
        "ApprovalRequired",
        "alice may, after approval"
    );
}

#[test]
fn help_says_what_answers_without_a_backend() {
    let out = airlock(&["exec", "--help"], "", &[]);
    let help = text(&out.stdout);
    assert!(
        help.contains("simulated Proxmox VE cluster") && help.contains("node_list"),
        "{help}"
    );
}

#[test]
fn the_removed_demo_fleet_section_is_refused_with_what_replaced_it() {
    let state = State::new();
    let config = state.config("[backends.demo]\nlatency_ms = 0\n");
    let out = state.run(&["--config", &config, "exec", "-"], "1");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("[backends]") && err.contains("removed") && err.contains("vm_list"),
        "{err}"
    );
}

#[test]
fn a_proxmox_section_without_targets_is_refused_not_simulated() {
    let state = State::new();
    let config = state.config("[proxmox]\ncatalog = \"full\"\n");
    let out = state.run(&["--config", &config, "exec", "-"], "1");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("[proxmox] names no target"), "{err}");
    assert!(!err.contains("simulated Proxmox VE cluster at"), "{err}");
}

#[test]
fn a_configuration_s_own_identities_are_not_joined_by_the_demo_ones() {
    let state = State::new();
    let config = state.config("[identities.bob]\nmode = \"operator\"\n");
    let out = state.run(
        &[
            "--config",
            &config,
            "exec",
            "--json",
            "--identity",
            "alice",
            "-",
        ],
        "await tools.vm_start({node: 'pve1', vmid: 103})",
    );
    let o = json_of(&out);
    assert_eq!(o["access_mode"], "ro", "alice is not listed, so read-only");
    assert_eq!(o["result"]["error"]["kind"], "PolicyDenied", "{o}");
}

const CONFIG: &str = "[identities.alice]\nmode = \"rw\"\n[identities.bob]\nmode = \"operator\"\ndeny = [\"vm_stop\"]\n[identities.carol]\n";

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

#[test]
fn policy_denials_are_reported_and_audited() {
    let state = State::new();
    let config = state.config(CONFIG);
    let out = state.run(
        &[
            "--config",
            &config,
            "exec",
            "--json",
            "--identity",
            "bob",
            "-",
        ],
        "await tools.vm_stop({node: 'pve1', vmid: 100})",
    );
    assert_eq!(out.status.code(), Some(1));
    let o = json_of(&out);
    assert_eq!(o["result"]["error"]["kind"], "PolicyDenied");
    assert!(o["result"]["error"]["reason"]
        .as_str()
        .unwrap()
        .contains("deny list of identity bob"));
    assert_eq!(o["trace"][0]["status"], "policy_denied");
    assert_eq!(o["access_mode"], "operator");
    // The default identity is read-only.
    let out = state.run(
        &["--config", &config, "exec", "-"],
        "await tools.vm_start({node: 'pve1', vmid: 103})",
    );
    assert!(
        text(&out.stderr).contains("identity local has mode ro"),
        "{}",
        text(&out.stderr)
    );
    let log = std::fs::read_to_string(state.audit()).unwrap();
    assert_eq!(log.matches("\"decision\":\"denied\"").count(), 2);
    let out = state.run(&["audit", "verify"], "");
    assert!(out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn approval_round_trip_from_the_command_line() {
    let state = State::new();
    let config = state.config(CONFIG);
    let script = "await tools.vm_start({node: 'pve1', vmid: 103})";
    let exec = |state: &State| {
        state.run(
            &[
                "--config",
                &config,
                "exec",
                "--json",
                "--no-wait",
                "--identity",
                "alice",
                "-",
            ],
            script,
        )
    };

    // Told on a terminal once how to approve it, not twice.
    let plain = state.run(
        &[
            "--config",
            &config,
            "exec",
            "--no-wait",
            "--identity",
            "alice",
            "-",
        ],
        "await tools.vm_start({node: 'pve1', vmid: 103})",
    );
    let said = text(&plain.stderr);
    assert_eq!(said.matches("approvals approve").count(), 1, "{said}");

    let first = json_of(&exec(&state));
    assert_eq!(first["result"]["error"]["kind"], "ApprovalRequired");
    let id = first["result"]["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The hint names this configuration, so it reaches the same store.
    let how = first["result"]["error"]["how"].as_str().unwrap();
    assert!(
        how.contains(&format!("airlock --config {config} approvals approve {id}")),
        "{how}"
    );

    let listed = json_of(&state.run(&["--config", &config, "approvals", "list", "--json"], ""));
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["summary"], "node=pve1, vmid=103");
    assert_eq!(listed[0]["identity"], "alice");

    // It runs as printed, from anywhere, where no `airlock` is on PATH (a
    // build from a checkout): the binary is named by its full path.
    let printed = how
        .split('`')
        .find(|p| p.contains("approvals approve"))
        .unwrap();
    assert!(printed.starts_with('/'), "{printed}");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{printed} --by carol"))
        .current_dir("/")
        .env("PATH", "/usr/bin:/bin")
        .env("AIRLOCK_STATE_DIR", state.path())
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{printed}: {}", text(&out.stderr));

    // Each exec starts a fresh simulated cluster; the approval lives in
    // the configured state directory, so it outlives the first run.
    let second = json_of(&exec(&state));
    let task = second["result"]["ok"].as_str().unwrap_or_default();
    assert!(
        task.starts_with("UPID:pve1:") && task.contains(":qmstart:103:"),
        "the start ran as a task: {second}"
    );
    assert_eq!(second["untrusted_data"], true);

    // Used up: the same call needs a new approval.
    let third = json_of(&exec(&state));
    assert_eq!(third["result"]["error"]["kind"], "ApprovalRequired");
    assert_ne!(third["result"]["error"]["request_id"], id.as_str());
    let out = state.run(&["--config", &config, "approvals", "approve", &id], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("already used"),
        "{}",
        text(&out.stderr)
    );

    // Denied with a reason: `show` has it, and so does the agent.
    let again = third["result"]["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = state.run(
        &[
            "--config",
            &config,
            "approvals",
            "deny",
            &again,
            "--by",
            "carol",
            "--reason",
            "vm 103 is the build host; ask in #ops",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = state.run(&["--config", &config, "approvals", "show", &again], "");
    assert!(
        text(&out.stdout)
            .contains(r#"denied by carol (cli): "vm 103 is the build host; ask in #ops""#),
        "{}",
        text(&out.stdout)
    );
    let fourth = json_of(&exec(&state));
    let told = fourth["result"]["error"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        told.contains(r#"by carol: "vm 103 is the build host; ask in #ops""#),
        "{fourth}"
    );

    let out = state.run(&["audit", "verify"], "");
    assert!(out.status.success(), "{}", text(&out.stdout));
}

/// `airlock demo FILE` exits when its script ends, so the approval command
/// it prints must reach a store that outlives it, and the script's next
/// run must find the approval there.
#[test]
fn the_demo_approval_command_works_after_the_demo_exits() {
    let state = State::new();
    let script = "await tools.vm_stop({node: 'pve1', vmid: 100})";
    let demo = |state: &State| {
        state.run(
            &[
                "demo",
                "--json",
                "--no-wait",
                "--identity",
                "olga",
                "--task-delay-ms",
                "1",
                "-",
            ],
            script,
        )
    };
    let first = json_of(&demo(&state));
    assert_eq!(first["result"]["error"]["kind"], "ApprovalRequired");
    let id = first["result"]["error"]["request_id"].as_str().unwrap();
    let how = first["result"]["error"]["how"].as_str().unwrap();
    let printed = how
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("a command in backquotes: {how}"));
    let words: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(words.last(), Some(&id), "{printed}");
    // Run as printed, from another directory and without the test's
    // state variable: the command alone must name the store.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new(words[0])
        .args(&words[1..])
        .current_dir(elsewhere.path())
        .env_remove("AIRLOCK_STATE_DIR")
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{printed}: {}", text(&out.stderr));
    let second = json_of(&demo(&state));
    let task = second["result"]["ok"].as_str().unwrap_or_default();
    assert!(task.contains(":qmstop:100:"), "approved, it ran: {second}");
    let out = state.run(&["audit", "verify"], "");
    assert!(out.status.success(), "{}", text(&out.stdout));
}

/// A shell set up for the real deployment (its audit file, its shared
/// database) that runs the demo: the demo's approvals and audit stay in
/// its own state directory, so a demo approval can never let a call run
/// against the real cluster, nor a demo line join the real chain.
#[test]
fn the_simulated_cluster_never_uses_a_real_deployments_state() {
    let state = State::new();
    let real_audit = state.path().join("real-audit.jsonl");
    let real_audit_str = real_audit.display().to_string();
    let out = run_in(
        state.path(),
        &["demo", "--task-delay-ms", "1"],
        "",
        &[
            ("AIRLOCK_AUDIT_FILE", real_audit_str.as_str()),
            // Nothing listens there: were it used, the demo would fail.
            (
                "AIRLOCK_STATE_URL",
                "postgres://airlock@127.0.0.1:9/airlock",
            ),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("are not used"),
        "{}",
        text(&out.stderr)
    );
    assert!(!real_audit.exists(), "the real audit file was not touched");
    assert!(state.audit().exists(), "the demo's own audit was written");
}

/// With the collector down since start-up, a search that finds nothing
/// says why and fails, instead of reporting an empty catalog.
#[test]
fn search_says_when_the_collector_has_not_answered() {
    let state = State::new();
    let key = state.path().join("quox.key");
    airlock_edge::credential_file::write(&key, "k-1\n").unwrap();
    // Port 9 (discard) has nothing listening here.
    let config = state.config(&format!(
        "[collector]\nurl = \"http://127.0.0.1:9\"\nservice_key_file = {:?}\n",
        key.display().to_string()
    ));
    let out = state.run(&["--config", &config, "search", "fleet", "status"], "");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("has not answered since Airlock started"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn audit_verify_finds_the_edited_line() {
    let state = State::new();
    for _ in 0..2 {
        assert!(state
            .run(&["exec", "-"], "await tools.node_list({})")
            .status
            .success());
    }
    let log = std::fs::read_to_string(state.audit()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 8, "{log}");
    let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    edited[1] = edited[1].replace("\"identity\":\"local\"", "\"identity\":\"admin\"");
    assert_ne!(edited[1], lines[1], "the edit changed the line");
    std::fs::write(state.audit(), edited.join("\n") + "\n").unwrap();
    let out = state.run(&["audit", "verify"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("BROKEN at line 2"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn secrets_in_results_are_redacted() {
    let out = airlock(
        &["exec", "-"],
        "await tools.vm_config({node: 'pve1', vmid: 100})",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["ciuser"], "admin", "other fields pass");
    assert_eq!(v["cipassword"], "[redacted]");
    assert!(!text(&out.stdout).contains("*****"));
}

#[test]
fn search_and_schema() {
    let out = airlock(&["search", "--json", "power", "on", "a", "guest"], "", &[]);
    let r = json_of(&out);
    assert_eq!(r["hits"][0]["name"], "vm_start");
    assert!(
        r["hits"][0]["signature"]
            .as_str()
            .unwrap()
            .starts_with("vm_start(args: { node: string; vmid: number;"),
        "{r}"
    );
    let out = airlock(&["schema", "--json", "vm_list", "vm_lst"], "", &[]);
    assert_eq!(out.status.code(), Some(1), "one name was unknown");
    let a = json_of(&out);
    assert!(a[0]["typescript"]
        .as_str()
        .unwrap()
        .contains("function vm_list(args: {"));
    assert_eq!(a[1]["did_you_mean"][0], "vm_list");
}

#[test]
fn unknown_names_in_policy_lists_fail_startup() {
    let state = State::new();
    let config = state.config("[identities.bob]\ndeny = [\"vm_stpo\"]\n");
    let out = state.run(&["--config", &config, "exec", "-"], "1");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("identities.bob.deny names `vm_stpo`") && err.contains("vm_stop"),
        "{err}"
    );
}

#[test]
fn enroll_makes_the_directory_its_file_is_in() {
    use std::os::unix::fs::PermissionsExt;
    let state = State::new();
    let file = state.path().join("new/keys/clients.toml");
    let out = state.run(&["enroll", "bob", "--file", file.to_str().unwrap()], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).trim().starts_with("alk_"));
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("identity = \"bob\""));
    let mode = std::fs::metadata(file.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o700,
        "made private, as the state directory is"
    );
    let file_mode = || std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(file_mode(), 0o600, "whoever writes it enrolls keys");
    // Revoking rewrites it whole, still 0600.
    let out = state.run(&["enroll", "carol", "--file", file.to_str().unwrap()], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = state.run(&["revoke", "bob", "--file", file.to_str().unwrap()], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(file_mode(), 0o600);
    // One others can write is refused, naming the fix; nothing is added.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
    let before = std::fs::read(&file).unwrap();
    let out = state.run(&["enroll", "mallory", "--file", file.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("open to its group and every user (mode 664)")
            && err.contains(&format!("chmod 600 {}", file.display())),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

#[test]
fn a_script_finds_and_describes_tools_it_may_call() {
    let script = "const found = await catalog.search('stop a vm', { limit: 5 });\n\
        const [d] = await catalog.describe('vm_stop');\n\
        let bad;\n\
        try { await catalog.search('x', 'read'); } catch (e) { bad = e.message; }\n\
        ({ names: found.hits.map((h) => h.name), tiers: [...new Set(found.hits.map((h) => h.tier))], \
           stop: d.error ? 'hidden' : [d.endpoint, d.typescript.includes('function vm_stop(')], bad })";
    let run = |who: &str| {
        let out = airlock(&["demo", "--identity", who, "--json", "-"], script, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        outcome["result"]["ok"].clone()
    };
    // rita reads only: no tool she may not call is shown or described.
    let rita = run("rita");
    assert_eq!(rita["tiers"], serde_json::json!(["read"]), "{rita}");
    assert_eq!(rita["stop"], "hidden", "{rita}");
    assert!(
        rita["bad"]
            .as_str()
            .unwrap()
            .contains("options must be an object"),
        "{rita}"
    );
    // olga operates: stopping a VM is hers to find.
    let olga = run("olga");
    assert_eq!(olga["names"][0], "vm_stop", "{olga}");
    assert_eq!(
        olga["stop"],
        serde_json::json!(["POST /nodes/{node}/qemu/{vmid}/status/stop", true]),
        "{olga}"
    );
}

/// The rename case through `airlock exec`: a collector that lists both
/// `docker.status` and `docker_status` gives the plain name
/// `quox_docker_status` to the second and spells the first out
/// (`quox_docker_dot_status`). A deny list written when only the first
/// existed (`quox_docker_status`) still denies it under its new name,
/// and the newcomer answering to that name too: nothing reaches the
/// collector.
#[test]
fn a_denied_collector_tool_stays_denied_when_another_takes_its_name() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sim = runtime
        .block_on(airlock_sim::collector::CollectorSim::start(0, "k-2"))
        .unwrap();
    sim.install_tool(serde_json::json!({"name": "docker_status", "description": "Added later.",
        "input_schema": {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}}));
    let state = State::new();
    let key = state.path().join("quox.key");
    airlock_edge::credential_file::write(&key, "k-2\n").unwrap();
    let config = state.config(&format!(
        "[identities.ops]\nmode = \"rw\"\n[policy]\ndeny = [\"quox_docker_status\"]\n\
         [collector]\nurl = {:?}\nservice_key_file = {:?}\n",
        sim.url(),
        key.display().to_string()
    ));
    let script = "const r = await Promise.allSettled([tools.quox_docker_dot_status({host: 'edge-1'}), tools.quox_docker_status({host: 'edge-1'})]);\n\
                  r.map((x) => x.status === 'fulfilled' ? 'ok' : x.reason.code)";
    let out = state.run(
        &[
            "--config",
            &config,
            "exec",
            "--identity",
            "ops",
            "--json",
            "-",
        ],
        script,
    );
    let outcome = json_of(&out);
    assert_eq!(
        outcome["result"]["ok"],
        serde_json::json!(["policy_denied", "policy_denied"]),
        "{outcome}"
    );
    assert_eq!(sim.executes(), 0, "nothing reached the collector");
    drop(sim);
}

/// `airlock exec` waits for a decision by default: it says what it waits
/// for (the request and the command that decides it), goes on once an
/// operator approves from another shell, and the change is made once, in
/// one execution that parked and resumed.
#[test]
fn exec_waits_for_a_decision_and_goes_on_as_one_execution() {
    use std::io::{BufRead, BufReader, Read};
    let state = State::new();
    let config = state.config(CONFIG);
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "--config",
            &config,
            "exec",
            "--json",
            "--identity",
            "alice",
            "-",
        ])
        .env("AIRLOCK_STATE_DIR", state.path())
        .env_remove("AIRLOCK_CONFIG")
        .env_remove("AIRLOCK_IDENTITY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"await tools.vm_start({node: 'pve1', vmid: 103})")
            .unwrap();
    }
    // Killed on a failed assertion: the test owns the process.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(child);
    let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
    let mut said = String::new();
    let waiting = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "exec ended without waiting: {said}"
        );
        said.push_str(&line);
        if line.contains("[airlock] waiting: vm_start") {
            break line;
        }
    };
    let id = waiting
        .split_whitespace()
        .find(|w| w.starts_with("ap-"))
        .unwrap()
        .trim_end_matches(['`', ','])
        .to_string();
    assert!(
        waiting.contains(&format!("approvals approve {id}")) && waiting.contains("waits"),
        "{waiting}"
    );
    let approved = state.run(
        &[
            "--config",
            &config,
            "approvals",
            "approve",
            &id,
            "--by",
            "carol",
        ],
        "",
    );
    assert!(approved.status.success(), "{}", text(&approved.stderr));
    let status = child.0.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{said}{rest}{out}");
    let o: serde_json::Value = serde_json::from_str(&out).unwrap();
    let task = o["result"]["ok"].as_str().unwrap_or_default();
    assert!(task.contains(":qmstart:103:"), "{o}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(state.audit())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let count = |event: &str| lines.iter().filter(|l| l["event"] == event).count();
    assert_eq!(
        [
            count("execution_start"),
            count("execution_parked"),
            count("execution_resumed"),
            count("execution_end"),
        ],
        [1, 1, 1, 1]
    );
    let sent = lines
        .iter()
        .filter(|l| l["event"] == "call" && l["tool"] == "vm_start" && l["decision"] == "allowed")
        .count();
    assert_eq!(sent, 1, "started once");
}

/// Unattended, `exec` does not wait for ever: once the requests it waits
/// for expire undecided, it ends as it would have without waiting.
#[test]
fn exec_ends_when_nobody_decides_before_the_request_expires() {
    let state = State::new();
    let config = state.config(&format!("{CONFIG}[approval]\nttl_secs = 1\n"));
    let out = state.run(
        &[
            "--config",
            &config,
            "exec",
            "--json",
            "--identity",
            "alice",
            "-",
        ],
        "await tools.vm_start({node: 'pve1', vmid: 103})",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let o = json_of(&out);
    assert_eq!(o["result"]["error"]["kind"], "ApprovalRequired", "{o}");
    assert!(
        o["result"]["error"]["how"]
            .as_str()
            .unwrap_or_default()
            .contains("nobody decided"),
        "{o}"
    );
    assert!(text(&out.stderr).contains("[airlock] waiting: vm_start"));
}

/// Completions and manual pages come from the CLI definition: every
/// subcommand is in them, and the shells and `man` read them.
#[test]
fn completions_and_manual_pages_cover_every_subcommand() {
    let out = airlock(&["completions", "bash"], "", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bash = text(&out.stdout);
    for word in [
        "exec",
        "serve",
        "approvals",
        "runbook",
        "completions",
        "--identity",
    ] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("airlock.bash");
    std::fs::write(&script, &bash).unwrap();
    let check = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(check.status.success(), "bash -n: {}", text(&check.stderr));
    let zsh = text(&airlock(&["completions", "zsh"], "", &[]).stdout);
    assert!(
        zsh.starts_with("#compdef airlock"),
        "{}",
        &zsh[..zsh.len().min(80)]
    );
    let fish = text(&airlock(&["completions", "fish"], "", &[]).stdout);
    assert!(
        fish.contains("complete -c airlock"),
        "{}",
        &fish[..fish.len().min(80)]
    );
    let refused = airlock(&["completions", "tcsh"], "", &[]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("bash"),
        "names the shells: {}",
        text(&refused.stderr)
    );

    let pages = dir.path().join("man");
    std::fs::create_dir(&pages).unwrap();
    let out = airlock(&["man", "--dir", pages.to_str().unwrap()], "", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in [
        "airlock.1",
        "airlock-exec.1",
        "airlock-serve.1",
        "airlock-approvals-approve.1",
        "airlock-completions.1",
    ] {
        let roff =
            std::fs::read_to_string(pages.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(roff.contains(".TH"), "{page} is a manual page");
    }
    // `man` renders a page as a reader sees it (where man-db is installed;
    // Debian's package build checks the pages again).
    match Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(pages.join("airlock-exec.1"))
        .env("MANWIDTH", "80")
        .output()
    {
        Ok(shown) => {
            assert!(shown.status.success(), "man: {}", text(&shown.stderr));
            let shown = text(&shown.stdout);
            assert!(
                shown.contains("airlock-exec") && shown.contains("--identity"),
                "{shown}"
            );
        }
        Err(e) => eprintln!("SKIPPED rendering with man: {e}"),
    }
    let main_page = text(&airlock(&["man"], "", &[]).stdout);
    assert!(
        main_page.starts_with(".ie") && main_page.contains("airlock"),
        "{main_page}"
    );
}

/// `airlock limits report` reads what each execution used from the
/// audit's end lines and sets it against the configured limits.
#[test]
fn the_limits_report_reads_each_limit_s_use_from_the_audit() {
    let state = State::new();
    let config = state.config("[limits]\ntool_calls = 8\nresult_bytes = 65536\n");
    // 22 runs: run i makes i % 4 + 1 calls and returns a string of
    // 10 * i characters (JSON: two quotes more); the last makes nine
    // calls, one past the limit.
    let runs = 22;
    for i in 0..runs {
        let calls = if i == runs - 1 { 9 } else { i % 4 + 1 };
        let script = format!(
            "for (let k = 0; k < {calls}; k++) await tools.node_list(); 'x'.repeat({})",
            10 * i
        );
        let out = state.run(&["--config", &config, "exec", "-"], &script);
        assert_eq!(
            out.status.code(),
            Some(if i == runs - 1 { 1 } else { 0 }),
            "{}",
            text(&out.stderr)
        );
    }
    let out = state.run(&["--config", &config, "limits", "report", "--json"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = json_of(&out);
    assert_eq!(r["executions"], runs);
    let limit = |name: &str| {
        r["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["limit"] == name)
            .unwrap_or_else(|| panic!("no {name} in {r:#}"))
            .clone()
    };
    let calls = limit("tool_calls");
    assert_eq!(calls["configured"], 8);
    assert_eq!(calls["executions"], runs);
    assert_eq!(calls["hits"], 1, "{calls}");
    // Calls made: 1, 2, 3, 4 repeated over 21 runs, then eight before
    // the ninth was refused.
    assert_eq!(calls["p50"], 2, "{calls}");
    assert_eq!(calls["max"], 8, "{calls}");
    // One identity's hit raises nothing past the limit (p99 plus
    // headroom would be 12): the suggestion is the floor for tool calls,
    // 10, which any data would give.
    assert_eq!(calls["hit_identities"], 1, "{calls}");
    assert_eq!(calls["suggested"], 10, "{calls}");
    let result = limit("result_bytes");
    assert_eq!(result["max"], 10 * (runs - 2) + 2, "{result}");
    assert_eq!(result["hits"], 0);
    let memory = limit("memory_bytes");
    assert!(memory["p50"].as_u64().unwrap() > 1 << 20, "{memory}");
    assert!(memory["suggested"].as_u64().unwrap() >= memory["max"].as_u64().unwrap());
    assert_eq!(limit("wall_time_ms")["executions"], runs);
    // The table names every limit, and says nothing was changed.
    let out = state.run(&["--config", &config, "limits", "report"], "");
    let table = text(&out.stdout);
    for name in [
        "wall_time_ms",
        "memory_bytes",
        "tool_calls",
        "result_bytes",
        "journal_bytes",
    ] {
        assert!(table.contains(name), "{table}");
    }
    assert!(
        table.contains("tool_calls: 1 execution(s) of 1 identity hit it"),
        "{table}"
    );
    assert!(table.contains("Nothing was changed"), "{table}");
    // The new end-line fields keep the chain whole.
    let out = state.run(&["--config", &config, "audit", "verify"], "");
    assert!(out.status.success(), "{}", text(&out.stdout));
}
