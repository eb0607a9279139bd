//! `airlock serve`: the MCP server over stdio (one identity) or
//! streamable HTTP (an identity per bearer key).

use std::{process::ExitCode, sync::Arc};

use airlock_gateway::Caller;
use airlock_sandbox::Sandbox;
use rmcp::ServiceExt;

use crate::{
    mcp::{AirlockServer, Shared},
    settings::{ConfigFile, SandboxFlags},
    shutdown::StopSignal,
    wiring,
};

pub async fn stdio(
    file: &ConfigFile,
    identity: &str,
    prefix: &str,
    flags: &SandboxFlags,
) -> ExitCode {
    let shared = match shared(file, prefix, flags).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut stop = StopSignal::register();
    tracing::info!(identity, mode = %shared.gateway.mode_of(&Caller::new(identity)), tools = shared.gateway.catalog().len(), "serving MCP on stdio");
    let started = tokio::select! {
        biased;
        _ = stop.received() => {
            tracing::info!("stopped before a client started a session");
            return ExitCode::SUCCESS;
        }
        s = AirlockServer::new(shared.clone(), identity).serve(crate::stdio::transport()) => s,
    };
    let service = match started {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: the MCP session did not start: {e}");
            return ExitCode::from(1);
        }
    };
    // SIGTERM (or Ctrl-C) ends the session as a closed stdin does, so the
    // process returns through `main` and what it started in-process (the
    // demo's simulator and its temporary directory) is cleaned up.
    let token = service.cancellation_token();
    let stopping = tokio::spawn(async move {
        stop.received().await;
        tracing::info!("stopping: the session ends as if its client had gone");
        token.cancel();
    });
    let ended = service.waiting().await;
    stopping.abort();
    // The client is gone and rmcp has cancelled what was still running;
    // let those executions write their end line before the process exits.
    executions_ended(&shared).await;
    match ended {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: the MCP session ended abnormally: {e}");
            ExitCode::from(1)
        }
    }
}

/// `airlock serve --http`.
pub async fn http(
    file: &ConfigFile,
    prefix: &str,
    flags: &SandboxFlags,
    options: crate::http::HttpOptions,
) -> ExitCode {
    let shared = match shared(file, prefix, flags).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let served = crate::http::serve(shared.clone(), options).await;
    executions_ended(&shared).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// How long a stopping server waits for cancelled executions to record
/// their end: a cancelled sandbox stops at its next epoch tick, so this
/// is only reached when something is badly stuck.
const END_LINE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

async fn executions_ended(shared: &Shared) {
    let stuck = shared.executions_ended(END_LINE_WAIT).await;
    if stuck > 0 {
        tracing::warn!(
            executions = stuck,
            "stopping with executions that did not record their end within {} s; their audit has a start without an end",
            END_LINE_WAIT.as_secs()
        );
    }
}

/// `airlock prepare`: the sandbox as `serve` would start it, built once
/// so that the compiled guest is in the cache (keyed by the guest, the
/// engine and the settings that change the code, so it must be these
/// settings), then dropped. Touches no state and no backend.
pub async fn prepare(file: &ConfigFile, flags: &SandboxFlags) -> ExitCode {
    let started = std::time::Instant::now();
    let config = match flags.resolve(file) {
        Ok((config, _)) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match Sandbox::new(config).await {
        Ok(sandbox) => {
            let dir = sandbox
                .config()
                .cache_dir
                .clone()
                .or_else(airlock_sandbox::default_cache_dir)
                .unwrap_or_default();
            let what = match sandbox.compiled_now() {
                true => "compiled the sandbox guest into",
                false => "the sandbox guest was already compiled in",
            };
            println!(
                "{what} {} ({:.1} s)",
                dir.display(),
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot prepare the sandbox: {e}");
            ExitCode::from(2)
        }
    }
}

/// The gateway, the sandbox and the limits every session shares.
pub async fn shared(
    file: &ConfigFile,
    prefix: &str,
    flags: &SandboxFlags,
) -> Result<Arc<Shared>, String> {
    let (config, limits) = flags.resolve(file).map_err(|e| e.to_string())?;
    let wiring::Wired { gateway, collector } = wiring::wire(file)
        .await
        .map_err(|e| format!("cannot start the tool gateway: {e}"))?;
    let sandbox = Sandbox::new(config)
        .await
        .map_err(|e| format!("cannot start the sandbox: {e}"))?;
    let durable = Arc::new(crate::durable::Durable::new(
        gateway.clone(),
        &limits,
        std::time::Duration::from_millis(sandbox.config().capacity.queue_wait_ms),
    ));
    let shared = Arc::new(Shared {
        gateway,
        sandbox,
        limits,
        prefix: prefix.to_string(),
        collector,
        executions: Default::default(),
        traces: Default::default(),
        durable,
        stopping: Default::default(),
        closing: Default::default(),
        tasks: Default::default(),
    });
    // Parked executions past their lifetime end even if nobody follows
    // them; the task ends with the server.
    let weak = Arc::downgrade(&shared);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            every.tick().await;
            match weak.upgrade() {
                Some(shared) => shared.end_expired(),
                None => return,
            }
        }
    });
    Ok(shared)
}
