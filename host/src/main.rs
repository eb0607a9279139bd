//! `airlock`: run agent JavaScript in the sandbox from the command line.
//! (The MCP server arrives with `airlock serve`.)

mod demo_fleet;
mod report;
mod settings;

use std::{io::Read, path::PathBuf, process::ExitCode, sync::Arc};

use airlock_sandbox::{Sandbox, ToolHost};
use clap::{Parser, Subcommand};
use settings::SandboxFlags;

const DEMO_SCRIPT: &str = include_str!("../../examples/fleet-report.js");

#[derive(Parser)]
#[command(
    name = "airlock",
    version,
    about = "Code-mode MCP server for infrastructure operations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a JavaScript file in the sandbox and print its result.
    ///
    /// Tools are served by the DEMO TOOL HOST: an in-memory fleet of 3
    /// nodes and 12 guests with a simulated 20 ms round trip (tools:
    /// list_nodes, list_guests, guest_status, start_guest, stop_guest). It
    /// is not a Proxmox backend; that arrives with the tool gateway.
    Exec {
        /// Script to run; `-` reads standard input.
        file: PathBuf,
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("starting the async runtime");
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    let (script, json, flags, banner) = match cli.command {
        Command::Exec {
            file,
            json,
            sandbox,
        } => match read_script(&file) {
            Ok(s) => (s, json, sandbox, false),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        Command::Demo { json, sandbox } => (DEMO_SCRIPT.to_string(), json, sandbox, true),
    };
    let (config, limits) = match flags.resolve() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let sandbox = match Sandbox::new(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot start the sandbox: {e}");
            return ExitCode::from(2);
        }
    };
    let host: Arc<dyn ToolHost> = Arc::new(demo_fleet::DemoFleet::new(demo_fleet::LATENCY));
    if banner {
        eprintln!("Running examples/fleet-report.js against the demo tool host (in-memory fleet, 20 ms per call):\n");
        eprintln!("{DEMO_SCRIPT}");
    }
    let outcome = sandbox.execute(&script, &limits, host.as_ref()).await;
    let ok = if json {
        report::json(&outcome)
    } else {
        report::human(&outcome)
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
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
