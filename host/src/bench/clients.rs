//! One request from the clients agents use, over HTTP: an MCP `ping` and
//! an `execute` of `1+1` against `airlock serve --http` (simulated
//! cluster, no key), over one kept-alive connection with Node's `fetch`,
//! the official TypeScript SDK's client and the official Python SDK's
//! client, beside curl on a new connection each time. A kept-alive
//! connection is how every one of them talks; Nagle's algorithm once
//! added about 40 ms to each of its requests (issue 63), which a new
//! connection per request never showed.
//!
//! The clients are the real ones, installed by the project's own scripts
//! (`mcp-clients/install.sh`, `scripts/test-venv.sh`) from the checkout
//! this binary was built in; a client that cannot be had here is left
//! out, and the bench says which and why.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use indicatif::ProgressBar;
use serde_json::Value as Json;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::measure::{Row, Summary, Value};

/// The checkout `airlock bench` was built from.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `server serve --http` on a free loopback port, with the simulated
/// cluster and no key, in a state directory of its own; killed when
/// dropped.
struct Served {
    _child: tokio::process::Child,
    _state: tempfile::TempDir,
    url: String,
}

async fn serve(server: &Path) -> Result<Served, String> {
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(server)
        .args([
            "serve",
            "--demo",
            "--http",
            "127.0.0.1:0",
            "--no-auth",
            "--identity",
            "local",
            // A bench sends far more than a person's client would.
            "--requests-per-minute",
            "0",
        ])
        .env("AIRLOCK_STATE_DIR", state.path())
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", server.display()))?;
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(at) = line.split("serving MCP at ").nth(1) {
                return Some(at.trim().to_string());
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .ok_or_else(|| {
        format!(
            "{} serve --http did not say where it serves",
            server.display()
        )
    })?;
    // Its later lines are not read: drained, so the server never blocks
    // on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Served {
        _child: child,
        _state: state,
        url,
    })
}

/// Runs `cmd`; its last line of output as JSON.
async fn json_of(mut cmd: tokio::process::Command, what: &str) -> Result<Json, String> {
    let out = cmd
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .map_err(|e| format!("{what}: {e}: {stdout}"))
}

/// An install script of the project's, run; why not, if it fails.
async fn install(script: &str, args: &[&Path]) -> Result<(), String> {
    let out = tokio::process::Command::new("sh")
        .arg(repo().join(script))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{script}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{script} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Milliseconds per request, as the client scripts print them.
fn samples(v: &Json, key: &str) -> Vec<Duration> {
    v[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Json::as_f64)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .collect()
}

/// A client's `{"ping": [...], "execute": [...]}`, as two rows.
fn rows(host: &str, v: &Json) -> Vec<Row> {
    ["ping", "execute"]
        .into_iter()
        .map(|what| Row {
            workload: match what {
                "ping" => "http_ping".into(),
                _ => "http_execute_1+1".into(),
            },
            mode: "fresh".into(),
            host: host.into(),
            value: Value::Latency(Summary::of(&samples(v, what))),
        })
        .collect()
}

/// The Node 22 that `mcp-clients/install.sh` brings (the Node on `PATH`
/// otherwise), and the folder of its packages.
async fn node() -> Result<(PathBuf, PathBuf), String> {
    let dir = repo().join("target/mcp-clients");
    install("mcp-clients/install.sh", &[&dir]).await?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let bundled = dir.join(format!("node_modules/node-linux-{arch}/bin/node"));
    let node = match bundled.exists() {
        true => bundled,
        false => PathBuf::from("node"),
    };
    Ok((node, dir))
}

/// curl on a new connection for every request of a session it opened.
async fn curl(url: &str, runs: usize) -> Result<Json, String> {
    const VERSION: &str = "2025-11-25";
    let post = |body: String, session: Option<&str>, write_out: &str| {
        let mut cmd = tokio::process::Command::new("curl");
        cmd.args(["-sS", "-o", "/dev/null", "-w", write_out, "-X", "POST"])
            .args(["-H", "content-type: application/json"])
            .args(["-H", "accept: application/json, text/event-stream"]);
        if let Some(s) = session {
            cmd.args(["-H", &format!("mcp-session-id: {s}")])
                .args(["-H", &format!("mcp-protocol-version: {VERSION}")]);
        }
        cmd.args(["--data", &body, url]);
        cmd
    };
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{VERSION}","capabilities":{{}},"clientInfo":{{"name":"airlock-bench-curl","version":"1"}}}}}}"#
    );
    let out = post(init, None, "%header{mcp-session-id}")
        .output()
        .await
        .map_err(|e| format!("curl: {e}"))?;
    let session = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if session.is_empty() {
        return Err("curl: initialize gave no session".into());
    }
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    post(initialized.into(), Some(&session), "%{http_code}")
        .output()
        .await
        .map_err(|e| format!("curl: {e}"))?;
    let mut out = serde_json::json!({"ping": [], "execute": []});
    let bodies = [
        ("ping", r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#),
        (
            "execute",
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute","arguments":{"script":"1+1"}}}"#,
        ),
    ];
    for i in 0..runs + 10 {
        for (what, body) in bodies {
            let took = post(body.into(), Some(&session), "%{http_code} %{time_total}")
                .output()
                .await
                .map_err(|e| format!("curl: {e}"))?;
            let said = String::from_utf8_lossy(&took.stdout).to_string();
            let (code, secs) = said.split_once(' ').unwrap_or_default();
            if code != "200" {
                return Err(format!("curl: {what} answered {said}"));
            }
            let secs: f64 = secs.trim().parse().map_err(|_| format!("curl: {said}"))?;
            if i >= 10 {
                out[what]
                    .as_array_mut()
                    .expect("an array")
                    .push((secs * 1000.0).into());
            }
        }
    }
    Ok(out)
}

/// The rows, and a line for each client left out.
pub async fn kept_alive(
    server: &Path,
    runs: usize,
    bar: &ProgressBar,
) -> Result<(Vec<Row>, Vec<String>), String> {
    let served = serve(server).await?;
    let url = served.url.clone();
    let (mut out, mut left_out) = (Vec::new(), Vec::new());
    match node().await {
        Ok((node, dir)) => {
            let program = dir.join("kept_alive.mjs");
            std::fs::copy(repo().join("benches/clients/kept_alive.mjs"), &program)
                .map_err(|e| format!("benches/clients/kept_alive.mjs: {e}"))?;
            for (way, host) in [
                ("fetch", "Node 22 fetch, kept alive"),
                ("sdk", "TypeScript SDK 1.32, kept alive"),
            ] {
                let mut cmd = tokio::process::Command::new(&node);
                cmd.arg(&program).arg(&url).arg(runs.to_string()).arg(way);
                match json_of(cmd, host).await {
                    Ok(v) => out.extend(rows(host, &v)),
                    Err(e) => left_out.push(e),
                }
                bar.inc(1);
            }
        }
        Err(e) => left_out.push(format!("Node's clients: {e}")),
    }
    let venv = repo().join("target/test-venv");
    match install("scripts/test-venv.sh", &[&venv]).await {
        Ok(()) => {
            let mut cmd = tokio::process::Command::new(venv.join("bin/python"));
            cmd.arg(repo().join("benches/clients/kept_alive.py"))
                .arg(&url)
                .arg(runs.to_string());
            let host = "Python SDK 2.3, kept alive";
            match json_of(cmd, host).await {
                Ok(v) => out.extend(rows(host, &v)),
                Err(e) => left_out.push(e),
            }
        }
        Err(e) => left_out.push(format!("the Python SDK: {e}")),
    }
    bar.inc(1);
    match curl(&url, runs).await {
        Ok(v) => out.extend(rows("curl, a new connection each", &v)),
        Err(e) => left_out.push(e),
    }
    bar.inc(1);
    Ok((out, left_out))
}
