//! The short fuzz run the test suite makes: every cargo-fuzz target in
//! `fuzz/` replays its regression inputs and then runs for a few seconds
//! (`AIRLOCK_FUZZ_SECONDS`, default 10) with coverage guidance. A finding
//! fails the test with the input's path. The longer run is the same script
//! with a bigger number (see fuzz/README.md).

use std::{path::Path, process::Command};

#[test]
fn every_fuzz_target_holds_for_a_short_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits in the repository root");
    let seconds = std::env::var("AIRLOCK_FUZZ_SECONDS").unwrap_or_else(|_| "10".into());
    let out = Command::new(root.join("fuzz/run.sh"))
        .arg(&seconds)
        .output()
        .expect("fuzz/run.sh starts");
    let log = String::from_utf8_lossy(&out.stderr);
    eprintln!("{log}");
    assert!(out.status.success(), "a fuzz target failed:\n{log}");
    for target in [
        "abi",
        "arguments",
        "pve_schema",
        "upid",
        "template",
        "audit_verify",
        "json_budget",
    ] {
        assert!(
            log.contains(&format!("fuzz: {target}: Done ")),
            "{target} did not run:\n{log}"
        );
    }
}
