//! `airlock`: serve MCP clients (`airlock serve`), run agent JavaScript in
//! the sandbox against the tool gateway, search the catalog, and administer
//! approvals, enrollment and the audit log from the command line.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use airlock::{admin, demo, lookup, plans::PlanArg, run, serve, settings, settings::SandboxFlags};
use clap::{CommandFactory, Parser, Subcommand};

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
    /// Diagnostics format on stderr (or in --log-file).
    #[arg(
        long,
        global = true,
        env = "AIRLOCK_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    log_format: airlock::log_output::LogFormat,
    /// Append diagnostics to this file instead of stderr.
    #[arg(long, global = true, env = "AIRLOCK_LOG_FILE", value_name = "FILE")]
    log_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a shell's completion script for airlock.
    ///
    /// For example `airlock completions bash >
    /// /etc/bash_completion.d/airlock`, or for zsh into a directory on
    /// `$fpath` as `_airlock`, or for fish into
    /// `~/.config/fish/completions/airlock.fish`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page airlock(1), or write it and one page per
    /// subcommand (airlock-exec(1), airlock-approvals-list(1), ...) into
    /// a directory.
    Man {
        /// Write every page into this directory as NAME.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Run a JavaScript file in the sandbox and print its result.
    ///
    /// Every tool call passes the gateway: validation, policy, approval,
    /// audit. Without a configured backend ([proxmox] or [collector]) it
    /// runs against the simulated Proxmox VE cluster, started in-process
    /// as `airlock demo` does: the same tool names as a real cluster
    /// (node_list, vm_list, vm_stop, ...), identities local and rita (ro),
    /// olga (operator), alice (rw).
    Exec {
        /// Script to run; `-` reads standard input.
        file: PathBuf,
        /// Identity the script runs as (its mode comes from [identities]).
        #[arg(long, env = "AIRLOCK_IDENTITY", default_value = "local")]
        identity: String,
        /// Print the whole outcome (result, logs, trace, stats) as JSON.
        #[arg(long)]
        json: bool,
        /// Record every change instead of making it, and file the changes
        /// as one plan for one approval.
        #[arg(long, conflicts_with = "apply")]
        plan: bool,
        /// Apply an approved plan (`pl-…`): its changes run without asking
        /// again, once.
        #[arg(long, value_name = "PLAN")]
        apply: Option<String>,
        /// Fail a call that needs another person's approval at once
        /// (`ApprovalRequired`, with the request id), instead of waiting
        /// for the decision — by default the script waits, says for what,
        /// and goes on once decided, nothing done twice.
        #[arg(long)]
        no_wait: bool,
        /// When the script waits for another person's decision, keep the
        /// execution in the deployment's state, print its id and exit:
        /// its identity follows it from an MCP client
        /// (`execute({"execution": ID})`) on any server sharing the state.
        #[arg(long, conflicts_with_all = ["no_wait", "plan", "apply"])]
        detach: bool,
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
    /// Start a simulated Proxmox VE cluster in-process and run a script
    /// against it (default: examples/fleet-report.js), ignoring any
    /// configured backend. No configuration needed.
    ///
    /// What it adds to `exec`: the fleet report by default, the simulator
    /// even when a backend is configured, a simulated collector
    /// (--collector) and the simulated tasks' duration.
    ///
    /// Identities: local and rita (mode ro), olga (operator), alice (rw).
    /// Approvals and the audit log are kept in the state directory for
    /// simulations (`<state>/simulated`), so an approval granted after the
    /// run is there for the script's next run.
    Demo {
        /// Script to run instead of the fleet report; `-` reads stdin.
        file: Option<PathBuf>,
        /// Identity to run as.
        #[arg(long, env = "AIRLOCK_IDENTITY", default_value = "local")]
        identity: String,
        /// Print the whole outcome as JSON.
        #[arg(long)]
        json: bool,
        /// How long a simulated task runs.
        #[arg(long, default_value_t = 300)]
        task_delay_ms: u64,
        /// Also start a simulated QuoxCORE collector; its tools appear as
        /// quox_fleet_status, quox_docker_status and quox_ssh_exec.
        #[arg(long)]
        collector: bool,
        /// Fail a call that needs approval at once instead of waiting for
        /// the decision (as `exec --no-wait`).
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
    /// Serve the simulated Proxmox VE cluster on loopback (HTTPS, a
    /// self-signed certificate) until interrupted, and write a
    /// configuration file that points Airlock at it.
    Sim {
        /// Port on 127.0.0.1 (0 picks a free one).
        #[arg(long, env = "AIRLOCK_SIM_PORT", default_value_t = 8006)]
        port: u16,
        /// Directory for the configuration file, token files and state.
        #[arg(long, default_value = "airlock-sim")]
        dir: PathBuf,
        /// How long a simulated task runs.
        #[arg(long, default_value_t = 1000)]
        task_delay_ms: u64,
    },
    /// Compile the sandbox guest into the cache now, with the sandbox
    /// settings the service will use, so that its first start does not
    /// spend seconds compiling. The Debian package runs it at install, as
    /// the service's user.
    Prepare {
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
    /// Serve Airlock to an MCP client on stdio (search, get_schema, execute).
    Serve {
        /// Identity the session acts as (its mode comes from [identities]).
        #[arg(long, env = "AIRLOCK_IDENTITY", default_value = "local")]
        identity: String,
        /// Prefix for the three tool names, e.g. `proxmox_code_`.
        #[arg(long, env = "AIRLOCK_TOOL_PREFIX", default_value = "")]
        prefix: String,
        /// Serve the simulated Proxmox VE cluster (started in-process)
        /// instead of the configured backends; identities as in `demo`.
        #[arg(long)]
        demo: bool,
        /// With --demo: also start a simulated QuoxCORE collector (its
        /// tools, resources and prompt are served too).
        #[arg(long, requires = "demo")]
        collector: bool,
        /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8787)
        /// instead of stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// HTTP: file of enrolled clients (bearer key hash → identity),
        /// re-read on SIGHUP. See `airlock enroll`.
        #[arg(long, env = "AIRLOCK_ENROLLMENT", value_name = "FILE")]
        enrollment: Option<PathBuf>,
        /// HTTP: accept requests without a key, all as --identity. Logs a
        /// warning; for loopback experiments only.
        #[arg(long)]
        no_auth: bool,
        /// HTTP: Host values to accept (default: localhost, 127.0.0.1, ::1).
        #[arg(long = "allowed-host")]
        allowed_hosts: Vec<String>,
        /// HTTP: browser Origins to accept, e.g. https://app.example:443
        /// (default: this server's own loopback origins; requests without
        /// an Origin, as from non-browser clients, are accepted).
        #[arg(long = "allowed-origin")]
        allowed_origins: Vec<String>,
        /// HTTP: largest request body.
        #[arg(long, default_value = "1MiB", value_parser = settings::parse_bytes)]
        max_body_bytes: u64,
        /// HTTP: requests per minute per client (0 = unlimited).
        #[arg(long, default_value_t = 600)]
        requests_per_minute: u32,
        /// HTTP: requests without a valid credential (none, an unknown
        /// key, a refused token) per client address and minute; past it
        /// the address gets 429 before any check (0 = unlimited).
        #[arg(long, default_value_t = 60)]
        failed_auth_per_minute: u32,
        /// HTTP: a reverse proxy (address or network, e.g. 127.0.0.1 or
        /// 10.0.0.0/8) whose X-Forwarded-For names the client; repeat for
        /// several. Without one the header is ignored.
        #[arg(long = "trusted-proxy", value_name = "ADDR", value_parser = airlock::door::parse_trusted_proxy)]
        trusted_proxies: Vec<ipnet::IpNet>,
        /// HTTP: on SIGTERM or Ctrl-C, how long executions in flight may
        /// go on finishing (no new requests are taken) before the rest
        /// are cancelled, e.g. 30s, 2m.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        shutdown_grace: std::time::Duration,
        /// HTTP: serve Prometheus metrics at http://ADDR/metrics, on a
        /// listener of its own (e.g. 127.0.0.1:9464).
        #[arg(long, value_name = "ADDR", requires = "http")]
        metrics: Option<std::net::SocketAddr>,
        /// The bearer key scrapers must send (the file's first line);
        /// needed when --metrics listens beyond loopback.
        #[arg(long, value_name = "FILE", requires = "metrics")]
        metrics_key_file: Option<PathBuf>,
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
    /// Issue a bearer key for an HTTP client: stores its hash (in the
    /// enrollment file, or with [state] backend = "postgres" in the
    /// database every replica reads) and prints the key once.
    Enroll {
        /// The identity the key acts as (its mode comes from [identities]).
        identity: String,
        /// The enrollment file (default with PostgreSQL state: the
        /// database).
        #[arg(long, env = "AIRLOCK_ENROLLMENT", value_name = "FILE")]
        file: Option<PathBuf>,
        /// Issue a person's key for the operator console (`alc_…`), which
        /// signs in at /console and calls no tool; agents' keys (`alk_…`)
        /// never sign in there.
        #[arg(long)]
        console: bool,
    },
    /// Revoke every key of an identity (in the enrollment file, or with
    /// [state] backend = "postgres" in the database). Servers stop
    /// accepting them when they re-read the keys: at once on SIGHUP, or
    /// within 5 s when the keys are in PostgreSQL.
    Revoke {
        identity: String,
        #[arg(long, env = "AIRLOCK_ENROLLMENT", value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Search the tool catalog, as an agent's `search` does.
    Search {
        /// What you want to do, e.g. `start vm`.
        query: Vec<String>,
        /// Only these tiers (read, operate, admin, forbidden).
        #[arg(long = "tier")]
        tiers: Vec<airlock_catalog::Tier>,
        /// Only this backend.
        #[arg(long)]
        backend: Option<String>,
        /// At most this many hits (default 10).
        #[arg(long)]
        limit: Option<usize>,
        /// Print the hits as JSON, as the MCP `search` tool returns them.
        #[arg(long)]
        json: bool,
    },
    /// Show tools' input schemas as JSON Schema and TypeScript.
    Schema {
        /// Tool names, as search shows them (e.g. vm_start node_list).
        names: Vec<String>,
        /// Print the answer as JSON, as the MCP `get_schema` tool returns it.
        #[arg(long)]
        json: bool,
    },
    /// List, approve or deny calls waiting for approval.
    Approvals {
        #[command(subcommand)]
        action: admin::ApprovalAction,
    },
    /// Durable executions waiting for decisions: list them, cancel one.
    Executions {
        #[command(subcommand)]
        action: airlock::executions_admin::ExecutionsAction,
    },
    /// Runbooks: reviewed scripts agents run by name (`runbooks.NAME`),
    /// approved once per version. See docs/CONFIGURATION.md.
    Runbook {
        #[command(subcommand)]
        action: airlock::runbook_admin::RunbookAction,
    },
    /// Measure: latency per workload and mode, concurrency, throughput,
    /// memory per live sandbox, start-up and search (see
    /// docs/PERFORMANCE.md). Prints a table and writes JSON.
    Bench(airlock::bench::BenchArgs),
    /// Check the audit log's hash chain.
    Audit {
        #[command(subcommand)]
        action: admin::AuditAction,
    },
    /// How close executions come to the sandbox's limits, read from the
    /// audit, with a suggested value per limit (changes nothing).
    Limits {
        #[command(subcommand)]
        action: airlock::limits_report::LimitsAction,
    },
}

fn main() -> ExitCode {
    // MCP client configurations (an `.mcpb` bundle's optional settings,
    // `${VAR}` substitutions) pass unset values as empty strings; an empty
    // AIRLOCK_* variable means "not set", not "the empty value".
    for (key, value) in std::env::vars_os() {
        if value.is_empty() && key.to_string_lossy().starts_with("AIRLOCK_") {
            std::env::remove_var(key);
        }
    }
    let cli = Cli::parse();
    // Generated from the definition above; no configuration, no logging.
    match &cli.command {
        Command::Completions { shell } => {
            // Into memory first: the generator panics on a write error (a
            // closed pipe), and a closed pipe is no error here.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "airlock", &mut script);
            return match std::io::Write::write_all(&mut std::io::stdout(), &script) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("error: writing the completion script: {e}");
                    ExitCode::from(2)
                }
                _ => ExitCode::SUCCESS,
            };
        }
        Command::Man { dir } => {
            let written = match dir {
                Some(dir) => clap_mangen::generate_to(Cli::command(), dir),
                None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()),
            };
            return match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: writing the manual pages: {e}");
                    ExitCode::from(2)
                }
            };
        }
        _ => {}
    }
    if let Err(e) = airlock::log_output::init(cli.log_format, cli.log_file.as_deref()) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // Commands that run their own simulation read no configuration unless
    // one is named; the others fall back to the packaged install's.
    let own_world = matches!(
        cli.command,
        Command::Demo { .. } | Command::Sim { .. } | Command::Bench(_)
    );
    let config_path = match own_world {
        true => cli.config.clone(),
        false => settings::config_path(cli.config.as_deref()),
    };
    let mut file = match settings::load_file(config_path.as_deref()) {
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
                plan,
                apply,
                no_wait,
                detach,
                sandbox,
            } => {
                let _simulated = match demo::or_simulated(&mut file).await {
                    Ok(s) => s,
                    Err(e) => return fail(&e),
                };
                let plan = match (plan, apply) {
                    (true, _) => PlanArg::Record,
                    (false, Some(id)) => PlanArg::Apply(id),
                    (false, None) => PlanArg::Run,
                };
                let script = run::Script::File(script);
                let on_wait = match (detach, no_wait) {
                    (true, _) => run::OnWait::Detach,
                    (false, true) => run::OnWait::Fail,
                    (false, false) => run::OnWait::Wait,
                };
                run::exec(&file, script, &identity, json, &plan, on_wait, &sandbox).await
            }
            Command::Demo {
                file: script,
                identity,
                json,
                task_delay_ms,
                collector,
                no_wait,
                sandbox,
            } => {
                demo_command(
                    script,
                    &identity,
                    json,
                    task_delay_ms,
                    collector,
                    !no_wait,
                    &sandbox,
                )
                .await
            }
            Command::Sim {
                port,
                dir,
                task_delay_ms,
            } => sim_command(port, &dir, task_delay_ms).await,
            Command::Prepare { sandbox } => airlock::serve::prepare(&file, &sandbox).await,
            Command::Serve {
                identity,
                prefix,
                demo,
                collector,
                http,
                enrollment,
                no_auth,
                allowed_hosts,
                allowed_origins,
                max_body_bytes,
                requests_per_minute,
                failed_auth_per_minute,
                trusted_proxies,
                shutdown_grace,
                metrics,
                metrics_key_file,
                sandbox,
            } => {
                let started = if demo {
                    file = settings::ConfigFile::default();
                    let options = demo::SimOptions {
                        collector,
                        own_state: true,
                        ..demo::SimOptions::default()
                    };
                    demo::simulate(&mut file, options).await.map(Some)
                } else {
                    demo::or_simulated(&mut file).await
                };
                let _simulated = match started {
                    Ok(s) => s,
                    Err(e) => return fail(&e),
                };
                let config = &file;
                match http {
                    None => serve::stdio(config, &identity, &prefix, &sandbox).await,
                    Some(listen) => {
                        let options = airlock::http::HttpOptions {
                            listen,
                            enrollment: enrollment.or_else(|| config.enrollment.clone()),
                            no_auth,
                            default_identity: identity,
                            allowed_hosts,
                            allowed_origins,
                            max_body_bytes: max_body_bytes as usize,
                            requests_per_minute,
                            failed_auth_per_minute,
                            trusted_proxies,
                            shutdown_grace,
                            metrics: metrics.map(|listen| airlock::metrics::MetricsOptions {
                                listen,
                                key_file: metrics_key_file,
                            }),
                            oauth: config.oauth.clone(),
                            console: config.console.clone(),
                        };
                        serve::http(config, &prefix, &sandbox, options).await
                    }
                }
            }
            Command::Enroll {
                identity,
                file: path,
                console,
            } => admin::enroll(&file, &identity, path, console),
            Command::Revoke {
                identity,
                file: path,
            } => admin::revoke(&file, &identity, path),
            Command::Search {
                query,
                tiers,
                backend,
                limit,
                json,
            } => {
                let _simulated = match demo::or_simulated(&mut file).await {
                    Ok(s) => s,
                    Err(e) => return fail(&e),
                };
                lookup::search(&file, &query.join(" "), tiers, backend, limit, json).await
            }
            Command::Schema { names, json } => {
                let _simulated = match demo::or_simulated(&mut file).await {
                    Ok(s) => s,
                    Err(e) => return fail(&e),
                };
                lookup::schema(&file, &names, json).await
            }
            Command::Approvals { action } => admin::approvals(&file, action),
            Command::Audit { action } => admin::audit(&file, action),
            Command::Limits { action } => airlock::limits_report::limits(&file, action),
            Command::Executions { action } => airlock::executions_admin::executions(&file, action),
            Command::Runbook { action } => airlock::runbook_admin::runbook(&file, action).await,
            Command::Bench(args) => airlock::bench::run(args).await,
            Command::Completions { .. } | Command::Man { .. } => {
                unreachable!("answered before the configuration is read")
            }
        }
    })
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

async fn demo_command(
    script: Option<PathBuf>,
    identity: &str,
    json: bool,
    task_delay_ms: u64,
    with_collector: bool,
    wait: bool,
    flags: &SandboxFlags,
) -> ExitCode {
    let mut file = settings::ConfigFile::default();
    let options = demo::SimOptions {
        task_delay: Duration::from_millis(task_delay_ms),
        collector: with_collector,
        own_state: false,
    };
    let simulated = match demo::simulate(&mut file, options).await {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    if let Err(e) = demo::keep_demo_state(&mut file) {
        return fail(&e);
    }
    let (nodes, guests) = simulated
        .sim
        .with_cluster(|c| (c.nodes.len(), c.guests.len()))
        .await;
    eprintln!(
        "Simulated Proxmox VE cluster at {} ({nodes} nodes, {guests} guests); running as identity {identity}.",
        simulated.sim.url()
    );
    if let Some(c) = &simulated.collector {
        eprintln!(
            "Simulated QuoxCORE collector at {} (3 tools, 2 resources, 1 prompt).",
            c.url()
        );
    }
    let script = match script {
        Some(path) => run::Script::File(path),
        None => run::Script::Demo,
    };
    let on_wait = match wait {
        true => run::OnWait::Wait,
        false => run::OnWait::Fail,
    };
    run::exec(&file, script, identity, json, &PlanArg::Run, on_wait, flags).await
}

async fn sim_command(port: u16, dir: &std::path::Path, task_delay_ms: u64) -> ExitCode {
    let (sim, config) = match demo::start(Duration::from_millis(task_delay_ms), port).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot start the simulated cluster on port {port}: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = match std::path::absolute(dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    let proxmox = match demo::proxmox_section(&sim, &config, &dir.join("tokens")) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "error: cannot write token files under {}: {e}",
                dir.display()
            );
            return ExitCode::from(2);
        }
    };
    let config_path = dir.join("airlock.toml");
    if let Err(e) = std::fs::write(
        &config_path,
        demo::config_toml(&proxmox, &dir.join("state")),
    ) {
        eprintln!("error: cannot write {}: {e}", config_path.display());
        return ExitCode::from(2);
    }
    println!("simulated Proxmox VE cluster: {}", sim.url());
    println!("certificate fingerprint:      {}", sim.fingerprint());
    println!("configuration:                {}", config_path.display());
    println!(
        "try:  airlock --config {} exec --identity alice examples/stop-node-vms.js",
        config_path.display()
    );
    println!("(Ctrl-C stops the simulator)");
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
