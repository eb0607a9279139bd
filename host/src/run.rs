//! `airlock exec` and `airlock demo`: one script, run as an identity,
//! through the sandbox and the gateway, audited from start to end.

use std::{io::Read, path::PathBuf, process::ExitCode};

use airlock_gateway::Caller;
use airlock_sandbox::Sandbox;

use crate::{
    execution::Execution,
    report,
    settings::{ConfigFile, SandboxFlags},
    wiring,
};

pub const DEMO_SCRIPT: &str = include_str!("../../examples/fleet-report.js");

pub enum Script {
    File(PathBuf),
    Demo,
}

pub async fn exec(
    file: &ConfigFile,
    script: Script,
    identity: &str,
    json: bool,
    flags: &SandboxFlags,
) -> ExitCode {
    let (source, banner) = match script {
        Script::File(path) => match read_script(&path) {
            Ok(s) => (s, false),
            Err(e) => return fail(&e),
        },
        Script::Demo => (DEMO_SCRIPT.to_string(), true),
    };
    let (config, limits) = match flags.resolve(file) {
        Ok(v) => v,
        Err(e) => return fail(&e.to_string()),
    };
    let gateway = match wiring::gateway(file).await {
        Ok(g) => g,
        Err(e) => return fail(&format!("cannot start the tool gateway: {e}")),
    };
    let sandbox = match Sandbox::new(config).await {
        Ok(s) => s,
        Err(e) => return fail(&format!("cannot start the sandbox: {e}")),
    };
    if banner {
        eprintln!("Running examples/fleet-report.js against the simulated cluster:\n");
        eprintln!("{DEMO_SCRIPT}");
    }
    let execution = match Execution::start(&gateway, Caller::new(identity), &source) {
        Ok(e) => e,
        Err(e) => return fail(&e.to_string()),
    };
    let tools = execution.tools();
    let (outcome, finished) = execution.run(&sandbox, &source, &limits, &tools).await;
    let execution = finished.id;
    let view = report::View {
        outcome: &outcome,
        identity,
        mode: gateway.mode_of(&Caller::new(identity)),
        execution: &execution,
    };
    let ok = if json {
        report::json(&view)
    } else {
        report::human(&view)
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

fn read_script(path: &PathBuf) -> Result<String, String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("reading the script from stdin: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}
