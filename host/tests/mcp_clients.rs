//! Airlock as third-party MCP clients see it: the MCP Inspector CLI over
//! stdio and streamable HTTP, and the official conformance suite over
//! HTTP. Both are npm packages; `mcp-clients/install.sh` installs them
//! (pinned by `mcp-clients/package-lock.json`) into `target/mcp-clients`
//! the first time. Without npm on PATH these tests say so and pass
//! vacuously: the rest of the suite covers the same ground with the rmcp
//! client.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_airlock");

/// The installed clients and the Node that runs them.
struct Clients {
    modules: PathBuf,
    node: PathBuf,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn clients() -> Option<&'static Clients> {
    static CLIENTS: OnceLock<Option<Clients>> = OnceLock::new();
    CLIENTS.get_or_init(install).as_ref()
}

fn install() -> Option<Clients> {
    if Command::new("npm").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED: npm is not on PATH, so the MCP Inspector and the conformance suite \
             cannot be installed; install Node.js 20 or newer to run these tests"
        );
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../mcp-clients");
    let out = Command::new("sh")
        .arg(repo().join("mcp-clients/install.sh"))
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mcp-clients/install.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let modules = dir.join("node_modules");
    // The packages bring Node 22 (both clients need it; Node 20 is common).
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let bundled = modules.join(format!("node-linux-{arch}/bin/node"));
    let node = if bundled.exists() {
        bundled
    } else {
        let version = Command::new("node").arg("--version").output().unwrap();
        let version = String::from_utf8_lossy(&version.stdout);
        let major: u32 = version
            .trim()
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        assert!(
            major >= 22,
            "the MCP clients need Node 22 or newer; found {version} and no bundled node in {}",
            modules.display()
        );
        PathBuf::from("node")
    };
    Some(Clients { modules, node })
}

impl Clients {
    /// Runs a client in a scratch directory of its own, which is also its
    /// HOME (the Inspector keeps a catalog of servers and must not write
    /// into the user's home) and is removed when the client is done. (A
    /// directory held by the shared `Clients` would never be removed: a
    /// static is never dropped.)
    fn run(&self, script: &str, args: &[&str]) -> Output {
        let scratch = tempfile::tempdir().unwrap();
        Command::new(&self.node)
            .arg(self.modules.join(script))
            .args(args)
            .current_dir(scratch.path())
            .env("HOME", scratch.path())
            .env("MCP_CATALOG_PATH", scratch.path().join("mcp.json"))
            .env_remove("AIRLOCK_CONFIG")
            .output()
            .unwrap()
    }

    /// Runs the Inspector CLI; returns its JSON answer and its stderr.
    fn inspector(&self, args: &[&str]) -> (Value, String) {
        let mut all = vec!["--cli"];
        all.extend_from_slice(args);
        let out = self.run(
            "@modelcontextprotocol/inspector/clients/launcher/build/index.js",
            &all,
        );
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        // It exits non-zero for a tool result with isError; the JSON says.
        let answer = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("inspector printed no JSON ({e}):\n{stdout}\n{stderr}"));
        (answer, stderr)
    }
}

/// `airlock serve --demo` on stdio, as the Inspector starts it: the
/// Inspector passes no environment of its own, so the state directory
/// goes in with `-e`.
/// The compiled-module cache of the test process, handed to servers the
/// clients spawn (their HOME is a scratch directory): otherwise every
/// spawn compiles the guest (5-15 s on a busy machine), which races the
/// Inspector's 15 s connect timeout.
fn cache_env() -> &'static str {
    static CACHE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        let dir = airlock_sandbox::default_cache_dir().expect("HOME or AIRLOCK_CACHE_DIR is set");
        format!("AIRLOCK_CACHE_DIR={}", dir.display())
    })
}

fn over_stdio<'a>(state: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "-e",
        state,
        "-e",
        cache_env(),
        "-e",
        "AIRLOCK_LOG=warn",
        BIN,
        "serve",
        "--demo",
    ];
    args.extend_from_slice(rest);
    args
}

fn tool_names(listed: &Value) -> Vec<&str> {
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

#[test]
fn the_inspector_cli_over_stdio() {
    let Some(c) = clients() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = format!("AIRLOCK_STATE_DIR={}", dir.path().display());
    let inspect = |rest: &[&str]| c.inspector(&over_stdio(&state, rest));

    // --strict reports schema portability problems; there are none.
    let (listed, stderr) = inspect(&["--method", "tools/list", "--strict"]);
    assert_eq!(tool_names(&listed), ["search", "get_schema", "execute"]);
    assert!(
        !stderr.contains("Issue:") && !stderr.contains("error"),
        "the schemas are portable: {stderr}"
    );

    let (found, _) = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "search",
        "--tool-arg",
        "query=shut down a vm",
    ]);
    let hits: Vec<&str> = found["structuredContent"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert!(hits[..3].contains(&"vm_shutdown"), "{hits:?}");

    let (schema, _) = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "get_schema",
        "--tool-arg",
        r#"names=["vm_list"]"#,
    ]);
    let text = schema["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("function vm_list(args: {"), "{text}");

    let fan_out = "script=const nodes = await tools.node_list({});\n\
        const per = await Promise.all(nodes.map((n) => tools.vm_list({node: n.node})));\n\
        ({nodes: nodes.length, running: per.flat().filter((v) => v.status === 'running').length})";
    let (ran, _) = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "execute",
        "--tool-arg",
        fan_out,
    ]);
    assert_eq!(ran["isError"], false, "{ran}");
    assert_eq!(
        ran["structuredContent"]["result"],
        serde_json::json!({"nodes": 3, "running": 7})
    );
    assert_eq!(ran["structuredContent"]["calls"]["count"], 4);

    // stdio runs read-only by default: a shutdown is refused before any
    // approval is asked.
    let (refused, _) = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "execute",
        "--tool-arg",
        "script=await tools.vm_shutdown({node: 'pve1', vmid: 101})",
    ]);
    assert_eq!(refused["isError"], true);
    assert_eq!(
        refused["structuredContent"]["error"]["kind"], "PolicyDenied",
        "{refused}"
    );

    let (me, _) = inspect(&["--method", "resources/read", "--uri", "airlock://identity"]);
    let me: Value = serde_json::from_str(me["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        (me["identity"].as_str(), me["mode"].as_str()),
        (Some("local"), Some("ro"))
    );

    let (prompt, _) = inspect(&[
        "--method",
        "prompts/get",
        "--prompt-name",
        "operate",
        "--prompt-args",
        "task=stop every running VM on pve2",
    ]);
    let body = prompt["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(
        body.starts_with("Task: stop every running VM on pve2"),
        "{body}"
    );
}

#[test]
fn the_inspector_cli_over_http_with_a_key_and_an_approval_from_a_shell() {
    let Some(c) = clients() else { return };
    let (server, alice, _rita) = common::Server::start(&[]);
    let bearer = format!("Authorization: Bearer {alice}");
    let inspect = |rest: &[&str]| {
        let mut args = vec![
            server.url.as_str(),
            "--transport",
            "http",
            "--header",
            &bearer,
        ];
        args.extend_from_slice(rest);
        c.inspector(&args)
    };
    let (listed, _) = inspect(&["--method", "tools/list"]);
    assert_eq!(tool_names(&listed), ["search", "get_schema", "execute"]);

    // The Inspector CLI cannot answer an elicitation, so the approval is
    // the operator's: the result quotes the command, run here as written.
    let script = "script=await tools.vm_start({node: 'pve2', vmid: 106})";
    let execute = [
        "--method",
        "tools/call",
        "--tool-name",
        "execute",
        "--tool-arg",
        script,
    ];
    let (first, _) = inspect(&execute);
    let answer = &first["structuredContent"];
    assert_eq!(answer["status"], "waiting", "{first}");
    let command = answer["waiting"][0]["how"]
        .as_str()
        .unwrap()
        .split('`')
        .nth(1)
        .unwrap();
    let out = Command::new("sh").args(["-c", command]).output().unwrap();
    assert!(out.status.success(), "{command}: {out:?}");
    // The execution waited; following it (from another connection of the
    // same key) goes on with it.
    let follow = format!("execution={}", answer["execution"].as_str().unwrap());
    let (second, _) = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "execute",
        "--tool-arg",
        &follow,
    ]);
    assert_eq!(second["isError"], false, "{second}");
    let upid = second["structuredContent"]["result"].as_str().unwrap();
    assert!(upid.starts_with("UPID:pve2:"), "{second}");

    // A wrong key is refused before MCP, and the client shows why.
    let out = c.run(
        "@modelcontextprotocol/inspector/clients/launcher/build/index.js",
        &[
            "--cli",
            &server.url,
            "--transport",
            "http",
            "--header",
            "Authorization: Bearer alk_wrong",
            // Without it a 401 starts an interactive OAuth flow.
            "--stored-auth-only",
            "--method",
            "tools/list",
        ],
    );
    assert!(!out.status.success());
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("a valid bearer key is required"), "{said}");
}

/// The scenarios a baseline expects to fail (each must fail only because
/// it calls a fixture of the suite's reference server).
fn baseline(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("mcp-clients").join(file)).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(str::to_string)
        .collect()
}

/// What one run of the suite gave.
struct Conformance {
    /// Checks that passed.
    passed: usize,
    /// Checks that failed (or warned), by id, with why.
    failed_for: std::collections::BTreeMap<String, String>,
    /// Scenarios that "passed" with no check passing or failing (none
    /// run, or all skipped by the suite): reported, never counted.
    vacuous: Vec<String>,
}

/// The scenarios the suite may pass with no check, and why: anything
/// else that does is a finding (it would count as passing while testing
/// nothing).
const VACUOUS: &[(&str, &str)] = &[(
    "tasks-status-notifications",
    "the suite skips it: SEP-2663 delivers notifications/tasks on the subscriptions/listen stream, which its harness does not observe",
)];

/// Runs the conformance suite (`suite`, its entry point under
/// node_modules) with `args` against a fresh `airlock serve --demo
/// --http --no-auth`, the `baseline` file's scenarios expected to fail.
fn conformance(c: &Clients, suite: &str, args: &[&str], baseline: &str) -> Conformance {
    let (server, _, _) = common::Server::start(&["--no-auth"]);
    let results = tempfile::tempdir().unwrap();
    let baseline_file = repo().join("mcp-clients").join(baseline);
    let mut all = vec!["server", "--url", &server.url];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--expected-failures",
        baseline_file.to_str().unwrap(),
        "-o",
        results.path().to_str().unwrap(),
    ]);
    let out = c.run(suite, &all);
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "conformance failures outside the baseline, or stale baseline entries:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The suite writes one directory of checks per scenario run, named
    // `server-SCENARIO-TIME`.
    let mut failed_for = std::collections::BTreeMap::new();
    let mut passed = 0;
    let mut vacuous = Vec::new();
    for entry in std::fs::read_dir(results.path()).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("checks.json")) else {
            continue;
        };
        let checks: Vec<Value> = serde_json::from_str(&text).unwrap();
        let mut judged = 0;
        for check in checks {
            match check["status"].as_str() {
                Some("SUCCESS") => {
                    passed += 1;
                    judged += 1;
                }
                Some("FAILURE") | Some("WARNING") => {
                    judged += 1;
                    let why = check["errorMessage"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    failed_for.insert(check["id"].as_str().unwrap().to_string(), why);
                }
                _ => {}
            }
        }
        if judged == 0 {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let scenario = name.strip_prefix("server-").unwrap_or(&name);
            let scenario = scenario.split("-20").next().unwrap_or(scenario);
            vacuous.push(scenario.to_string());
        }
    }
    assert!(passed >= 10, "{passed} checks passed:\n{report}");
    vacuous.sort();
    for scenario in &vacuous {
        let why = VACUOUS
            .iter()
            .find(|(s, _)| s == scenario)
            .map(|(_, why)| *why)
            .unwrap_or_else(|| panic!("{scenario} passed with no check run: a scenario that tests nothing is not a pass\n{report}"));
        eprintln!("conformance: {scenario} ran no check ({why}); not counted as passing");
    }
    Conformance {
        passed,
        failed_for,
        vacuous,
    }
}

/// Whether a failed check failed only because it needed a fixture of the
/// suite's reference server that Airlock does not list (or a step
/// before it did).
fn for_a_fixture(check: &str, why: &str) -> bool {
    // Checks that fail only as a consequence of a missing fixture (the
    // step before them needed one).
    const AFTER_A_FIXTURE: &[&str] = &[
        "sep-2322-multi-round-r1",
        "sep-2322-missing-response-rerequests",
        // The fixture tool test_reconnection answered "no tool", so there
        // was no tool response to resume.
        "server-sse-disconnect-resume",
    ];
    why.contains("no tool `")
        || why.contains("no prompt `")
        || why.contains("no resource test://")
        || why.contains("resources/subscribe")
        || why.contains("Not testable")
        || why.contains("Prerequisite failed")
        || why.contains("fixture")
        || why.contains("Available tools: search, get_schema, execute")
        || why.contains("failing_job")
        || AFTER_A_FIXTURE.contains(&check)
}

#[test]
fn the_conformance_suite_passes_all_but_its_fixture_scenarios() {
    let Some(c) = clients() else { return };
    let Conformance { failed_for, .. } = conformance(
        c,
        "@modelcontextprotocol/conformance/dist/index.js",
        &[],
        "conformance-baseline.yml",
    );
    let expected = baseline("conformance-baseline.yml");
    assert_eq!(failed_for.len(), expected.len(), "{failed_for:#?}");
    for (check, why) in &failed_for {
        let fixture = why.contains("no tool `test_")
            || why.contains("no prompt `test_")
            || why.contains("no resource test://")
            || why.contains("resources/subscribe");
        assert!(
            fixture,
            "{check} failed for another reason than a missing fixture: {why}"
        );
    }
}

/// The suite's pre-release on the 2026-07-28 revision (its required
/// scenarios, and the tasks extension's): every check passes but those
/// that call a fixture Airlock does not list, or find nothing of the
/// kind to test (mcp-clients/conformance-2026-baseline.yml names, for
/// each, the Airlock test covering the same plumbing).
#[test]
fn the_2026_conformance_suite_passes_all_but_its_fixture_scenarios() {
    let Some(c) = clients() else { return };
    let Conformance {
        passed,
        failed_for,
        vacuous,
    } = conformance(
        c,
        "conformance-2026/dist/index.js",
        &["--requirements", "2026-07-28"],
        "conformance-2026-baseline.yml",
    );
    // The scenarios Airlock can take part in pass: stateless requests,
    // caching, headers, discovery, resources not found, tools/list.
    assert!(passed >= 90, "{passed} checks passed: {failed_for:#?}");
    assert!(vacuous.len() <= VACUOUS.len(), "{vacuous:?}");
    for (check, why) in &failed_for {
        assert!(
            for_a_fixture(check, why),
            "{check} failed for another reason than a missing fixture: {why}"
        );
    }
}

/// The same pre-release with every scenario it has (`--suite all`:
/// pending and draft ones too, each on the revision it was written for),
/// against its own baseline (mcp-clients/conformance-2026-all-baseline.yml):
/// every check passes but those that need a fixture Airlock does not
/// list, and a scenario with no check is reported, not counted.
#[test]
fn the_2026_conformance_suite_s_every_scenario_passes_but_its_fixtures() {
    let Some(c) = clients() else { return };
    let Conformance {
        passed, failed_for, ..
    } = conformance(
        c,
        "conformance-2026/dist/index.js",
        &["--suite", "all"],
        "conformance-2026-all-baseline.yml",
    );
    assert!(passed >= 120, "{passed} checks passed: {failed_for:#?}");
    for (check, why) in &failed_for {
        assert!(
            for_a_fixture(check, why),
            "{check} failed for another reason than a missing fixture: {why}"
        );
    }
}
