//! `airlock exec` and `airlock demo`: one script, run as an identity,
//! through the sandbox and the gateway, audited from start to end.

use std::{io::Read, path::PathBuf, process::ExitCode, time::Instant};

use airlock_sandbox::Sandbox;
use airlock_tools::Caller;

use crate::{
    report,
    settings::{ConfigFile, SandboxFlags},
    wiring::{self, ScriptTools},
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
        eprintln!("Running examples/fleet-report.js against the demo tool host (in-memory fleet, 20 ms per call):\n");
        eprintln!("{DEMO_SCRIPT}");
    }
    let caller = Caller::new(identity);
    let execution = match gateway.execution_started(&caller, &source) {
        Ok(id) => id,
        Err(e) => {
            return fail(&format!(
                "the audit log cannot be written, so nothing runs: {e}"
            ))
        }
    };
    let tools = ScriptTools {
        gateway: gateway.clone(),
        caller: Caller {
            identity: identity.into(),
            execution: Some(execution.clone()),
        },
    };
    let t0 = Instant::now();
    let outcome = sandbox.execute(&source, &limits, &tools).await;
    let kind = outcome.error().map(|e| e.kind()).unwrap_or("ok");
    if let Err(e) =
        gateway.execution_finished(&execution, kind, outcome.stats.tool_calls, t0.elapsed())
    {
        eprintln!("warning: could not record the end of the execution in the audit log: {e}");
    }
    let view = report::View {
        outcome: &outcome,
        identity,
        mode: gateway.mode_of(identity),
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
