//! `airlock`: run agent JavaScript in the sandbox against the tool gateway,
//! search the catalog, and administer approvals and the audit log from the
//! command line. (The MCP server arrives with `airlock serve`.)

mod admin;
mod lookup;
mod report;
mod run;
mod settings;
mod wiring;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use settings::SandboxFlags;

#[derive(Parser)]
#[command(
    name = "airlock",
    version,
    about = "Code-mode MCP server for infrastructure operations"
)]
struct Cli {
    /// TOML configuration file (see docs/CONFIGURATION.md).
    #[arg(long, global = true, env = "AIRLOCK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a JavaScript file in the sandbox and print its result.
    ///
    /// Every tool call passes the gateway: validation, policy, approval,
    /// audit. With no other backend configured, tools come from the DEMO
    /// TOOL HOST: an in-memory fleet of 3 nodes and 12 guests with a
    /// simulated 20 ms round trip (list_nodes, list_guests, guest_status,
    /// guest_config, start_guest, stop_guest, delete_guest). It is not a
    /// Proxmox backend.
    Exec {
        /// Script to run; `-` reads standard input.
        file: PathBuf,
        /// Identity the script runs as (its mode comes from [identities]).
        #[arg(long, env = "AIRLOCK_IDENTITY", default_value = "local")]
        identity: String,
        /// Print the whole outcome (result, logs, trace, stats) as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
    /// Run the fleet-report example against the demo tool host.
    Demo {
        /// Print the whole outcome as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
    /// Search the tool catalog, as an agent's `search` does.
    Search {
        /// What you want to do, e.g. `start vm`.
        query: Vec<String>,
        /// Only these tiers (read, operate, admin, forbidden).
        #[arg(long = "tier")]
        tiers: Vec<airlock_tools::Tier>,
        /// Only this backend.
        #[arg(long)]
        backend: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Show tools' input schemas as JSON Schema and TypeScript.
    Schema {
        names: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// List, approve or deny calls waiting for approval.
    Approvals {
        #[command(subcommand)]
        action: admin::ApprovalAction,
    },
    /// Check the audit log's hash chain.
    Audit {
        #[command(subcommand)]
        action: admin::AuditAction,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AIRLOCK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .without_time()
        .init();
    let cli = Cli::parse();
    let file = match settings::load_file(cli.config.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("starting the async runtime");
    runtime.block_on(async move {
        match cli.command {
            Command::Exec {
                file: script,
                identity,
                json,
                sandbox,
            } => run::exec(&file, run::Script::File(script), &identity, json, &sandbox).await,
            Command::Demo { json, sandbox } => {
                run::exec(&file, run::Script::Demo, "local", json, &sandbox).await
            }
            Command::Search {
                query,
                tiers,
                backend,
                limit,
                json,
            } => lookup::search(&file, &query.join(" "), tiers, backend, limit, json),
            Command::Schema { names, json } => lookup::schema(&file, &names, json),
            Command::Approvals { action } => admin::approvals(&file, action),
            Command::Audit { action } => admin::audit(&file, action),
        }
    })
}
