//! `airlock serve`: the MCP server over stdio (one identity) or
//! streamable HTTP (an identity per bearer key).

use std::{process::ExitCode, sync::Arc};

use airlock_sandbox::Sandbox;
use rmcp::ServiceExt;

use crate::{
    mcp::{AirlockServer, Shared},
    settings::{ConfigFile, SandboxFlags},
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
    tracing::info!(identity, mode = %shared.gateway.mode_of(identity), tools = shared.gateway.catalog().len(), "serving MCP on stdio");
    let service = match AirlockServer::new(shared, identity)
        .serve(rmcp::transport::stdio())
        .await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: the MCP session did not start: {e}");
            return ExitCode::from(1);
        }
    };
    match service.waiting().await {
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
    match crate::http::serve(shared, options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
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
    Ok(Arc::new(Shared {
        gateway,
        sandbox,
        limits,
        prefix: prefix.to_string(),
        collector,
    }))
}
