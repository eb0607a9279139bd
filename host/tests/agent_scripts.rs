//! Scripts as agents write them (`tests/agent-scripts/`), each run through
//! `airlock exec` on the simulated cluster and through an MCP client
//! (rmcp over streamable HTTP) against `airlock serve --demo --http`,
//! each giving what `expected.json` says: its value, or an error of the
//! kind named whose message names the way that works.

mod common;

use std::{collections::BTreeMap, path::PathBuf, process::Command};

use serde_json::Value;

fn corpus() -> PathBuf {
    common::repo().join("tests/agent-scripts")
}

/// The expectations, by file name; every script has one, and every one a
/// script.
fn expected() -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(corpus().join("expected.json")).unwrap();
    let expected: BTreeMap<String, Value> = serde_json::from_str(&text).unwrap();
    let mut scripts: Vec<String> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "expected.json" && n != "README.md")
        .collect();
    scripts.sort();
    let named: Vec<String> = expected.keys().cloned().collect();
    assert_eq!(
        scripts, named,
        "every script and no other has an expectation"
    );
    expected
}

/// Whether `error` (a result's `error` object) is what `want` says.
fn error_is(error: &Value, want: &Value) -> bool {
    error["kind"] == want["error"]
        && error["message"]
            .as_str()
            .is_some_and(|m| m.contains(want["says"].as_str().unwrap()))
}

#[test]
fn each_script_gives_what_it_should_through_airlock_exec() {
    let mut wrong = Vec::new();
    for (name, want) in expected() {
        let out = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["exec", "--identity", "local", "--json"])
            .arg(corpus().join(&name))
            .env_remove("AIRLOCK_CONFIG")
            .env("AIRLOCK_LOG", "error")
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        let result = &answer["result"];
        let right = match want.get("ok") {
            Some(value) => &result["ok"] == value,
            None => error_is(&result["error"], &want),
        };
        if !right {
            wrong.push(format!("{name}: wanted {want}, got {result}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_script_gives_what_it_should_through_an_mcp_client() {
    let (server, _alice, rita) =
        tokio::task::block_in_place(|| common::Server::start(&["--requests-per-minute", "0"]));
    let client = server.connect(&rita).await;
    let mut wrong = Vec::new();
    for (name, want) in expected() {
        let script = std::fs::read_to_string(corpus().join(&name)).unwrap();
        let answer = common::call(&client, "execute", serde_json::json!({"script": script})).await;
        let s = answer.structured_content.clone().unwrap_or_default();
        let right = match want.get("ok") {
            Some(value) => answer.is_error != Some(true) && &s["result"] == value,
            None => error_is(&s["error"], &want),
        };
        if !right {
            wrong.push(format!("{name}: wanted {want}, got {s}"));
        }
    }
    let _ = client.cancel().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
