//! `serve --http --metrics`: a replica's Prometheus metrics, scraped over
//! HTTP and read with the Prometheus project's own parser (the Python
//! `prometheus-client`, pinned, in a venv `scripts/test-venv.sh` makes),
//! after a known mix of executions: every count is the one the mix must
//! produce, and only a scraper with the key reads them.

mod common;

use std::{collections::BTreeMap, process::Command, time::Duration};

use common::{call, serve_configured, Server};
use serde_json::json;

/// Parses an exposition with prometheus-client's OpenMetrics parser into
/// `{"name{label=value,...}": value}` (samples of every family).
fn parse(text: &str) -> BTreeMap<String, f64> {
    let program = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
"#;
    let out = fed(
        Command::new(common::test_python()).args(["-c", program]),
        text,
    );
    assert!(
        out.status.success(),
        "the Prometheus parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `cmd` with `input` on its standard input; what it printed.
fn fed(cmd: &mut Command, input: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn metrics_url(server: &Server) -> String {
    let line = server
        .said("metrics at ")
        .expect("the server names its metrics address");
    line.split("metrics at ").nth(1).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_what_the_executions_did() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("metrics.key");
    let key = "metrics-scraper-key-0123456789";
    airlock_edge::credential_file::write(&key_file, &format!("{key}\n")).unwrap();
    let (_sim, server, alice, _) = serve_configured(
        Duration::from_millis(5),
        "\n[rate]\ncalls_per_minute = 4\n\n[limits]\nwall_time_ms = 300\n",
        &[
            "--metrics",
            "127.0.0.1:0",
            "--metrics-key-file",
            key_file.to_str().unwrap(),
        ],
    )
    .await;
    let client = server.connect(&alice).await;
    let run = |script: &'static str| {
        let client = &client;
        async move { call(client, "execute", json!({"script": script})).await }
    };
    // The mix: one ok, one syntax error, one over the wall clock, one
    // needing approval, a made-up tool, and calls past the rate limit.
    run("1 + 1").await;
    run("(").await;
    run("while (true) {}").await;
    run("await tools.no_such_tool({})").await; // 1st token
    run("await tools.vm_start({node: 'pve1', vmid: 103})").await; // 2nd
    let r = run(
        "let n = 0; for (let i = 0; i < 6; i++) { try { await tools.node_list(); n++ } catch (e) {} } n",
    )
    .await;
    assert_eq!(
        r.structured_content.as_ref().unwrap()["result"],
        2,
        "two tokens left"
    );

    let url = metrics_url(&server);
    let http = reqwest::Client::new();
    // One request with a key nobody enrolled, refused at the door.
    let stranger = http
        .post(&server.url)
        .bearer_auth("alk_not-enrolled")
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), 401);
    let refused = http.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), 401, "no key, no metrics");
    let wrong = http
        .get(&url)
        .bearer_auth("not-the-key-at-all")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let scraped = http.get(&url).bearer_auth(key).send().await.unwrap();
    assert_eq!(scraped.status(), 200);
    assert!(scraped.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let body = scraped.text().await.unwrap();
    let m = parse(&body);
    let get = |k: &str| {
        m.get(k)
            .copied()
            .unwrap_or_else(|| panic!("no {k} in {m:#?}"))
    };

    for (outcome, n) in [
        ("ok", 2.0),
        ("SyntaxError", 1.0),
        ("LimitExceeded", 1.0),
        ("ToolError", 1.0),
        // Waits for an approval: its run ended parked.
        ("Parked", 1.0),
    ] {
        assert_eq!(
            get(&format!("airlock_executions_total{{outcome={outcome}}}")),
            n,
            "{outcome}"
        );
    }
    assert_eq!(get("airlock_execution_seconds_count{}"), 6.0);
    // What each execution used of its limits, one series per identity
    // mode, observed at its end (as `airlock limits report` reads it):
    // five ended in the sandbox; the sixth waits, parked, and is
    // observed when it ends.
    let by_mode = |family: &str| -> Vec<(String, f64)> {
        m.iter()
            .filter(|(k, _)| k.starts_with(&format!("{family}_count{{mode=")))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    // Five ended in the sandbox; two of them with a value (`1 + 1` and
    // the six calls), whose size is what `result_bytes` bounds.
    for (family, n) in [
        ("airlock_execution_used_tool_calls", 5.0),
        ("airlock_execution_used_sandbox_seconds", 5.0),
        ("airlock_execution_used_memory_bytes", 5.0),
        ("airlock_execution_used_result_bytes", 2.0),
    ] {
        let series = by_mode(family);
        assert_eq!(series.len(), 1, "{family}: {series:?}");
        assert_eq!(series[0].1, n, "{family}: {series:?}");
    }
    let mode = by_mode("airlock_execution_used_tool_calls")[0].0.clone();
    let mode = mode.split("mode=").nth(1).unwrap().trim_end_matches('}');
    // Calls made: none, none, none (over the wall clock), one refused,
    // six (two allowed, four rate-limited).
    assert_eq!(
        get(&format!(
            "airlock_execution_used_tool_calls_sum{{mode={mode}}}"
        )),
        0.0 + 0.0 + 0.0 + 1.0 + 6.0
    );
    // The run stopped by the wall clock spent about 300 ms in the sandbox.
    assert!(
        get(&format!(
            "airlock_execution_used_sandbox_seconds_sum{{mode={mode}}}"
        )) >= 0.3
    );
    assert!(
        get(&format!(
            "airlock_execution_used_memory_bytes_bucket{{le=1048576.0,mode={mode}}}"
        )) < 6.0,
        "a sandbox holds more than 1 MiB"
    );
    // The text format, for scrapers that ask for it, through
    // Prometheus' own checker where Debian's package provides it.
    let text = http
        .get(&url)
        .bearer_auth(key)
        .header("accept", "text/plain; version=0.0.4")
        .send()
        .await
        .unwrap();
    assert!(text.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = text.text().await.unwrap();
    assert!(
        text.contains("# TYPE airlock_executions_total counter\n"),
        "{text}"
    );
    promtool_check(&text);
    assert_eq!(get("airlock_limit_hits_total{limit=wall_time_ms}"), 1.0);
    assert_eq!(
        get("airlock_limit_hits_total{limit=rate.calls_per_minute}"),
        4.0
    );
    assert_eq!(
        get("airlock_tool_calls_total{decision=unknown_tool,tool=(unknown)}"),
        1.0
    );
    assert_eq!(
        get("airlock_tool_calls_total{decision=approval_required,tool=vm_start}"),
        1.0
    );
    assert_eq!(
        get("airlock_tool_calls_total{decision=allowed,tool=node_list}"),
        2.0
    );
    assert_eq!(
        get("airlock_tool_calls_total{decision=rate_limited,tool=node_list}"),
        4.0
    );
    assert_eq!(get("airlock_tool_call_seconds_count{}"), 8.0);
    assert_eq!(get("airlock_approvals_pending{}"), 1.0);
    // The execution that needs the approval waits for it, parked.
    assert_eq!(get("airlock_executions_parked{}"), 1.0);
    assert_eq!(get("airlock_executions_resumed_total{}"), 0.0);
    // Every one of alice's six executions was admitted to a slot, and
    // her time waiting for one is counted.
    assert_eq!(
        get("airlock_admissions_total{identity=alice,outcome=admitted}"),
        6.0
    );
    assert!(get("airlock_admission_wait_seconds_total{identity=alice}") >= 0.0);
    assert_eq!(get("airlock_http_refusals_total{reason=bad_key}"), 1.0);
    // Lines: 6 starts, 6 ends, a line per call refused or allowed but the
    // rate-limited ones after the first (counted on the next line), and a
    // result line per allowed call.
    assert_eq!(
        get("airlock_audit_appends_total{written=true}"),
        6.0 + 6.0 + 5.0 + 2.0
    );
    assert_eq!(
        get("airlock_audit_append_seconds_count{}"),
        get("airlock_audit_appends_total{written=true}")
    );
}

#[test]
fn metrics_beyond_loopback_need_a_key() {
    let out = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "serve",
            "--demo",
            "--http",
            "127.0.0.1:0",
            "--no-auth",
            "--metrics",
            "0.0.0.0:0",
        ])
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_STATE_DIR", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--metrics-key-file") && err.contains("0.0.0.0"),
        "{err}"
    );
}

/// `promtool check metrics` on a text-format exposition, with promtool from
/// `scripts/install-promtool.sh` (Debian's `prometheus` package, unpacked
/// under `target/`); SKIPPED, said, where there is none to be had.
fn promtool_check(body: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let found = Command::new("sh")
        .arg(root.join("scripts/install-promtool.sh"))
        .arg(root.join("target/promtool"))
        .output()
        .unwrap();
    if !found.status.success() {
        eprintln!(
            "SKIPPED promtool check metrics: {}",
            String::from_utf8_lossy(&found.stderr)
        );
        return;
    }
    let promtool = String::from_utf8(found.stdout).unwrap().trim().to_string();
    let out = fed(Command::new(&promtool).args(["check", "metrics"]), body);
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
