//! Where Airlock's own diagnostics go: `tracing` to stderr (never stdout,
//! which belongs to the MCP protocol under stdio) or to a file, as text
//! for people or JSON lines for log shippers. `AIRLOCK_LOG` filters
//! (`info` by default; rmcp's per-message chatter only from `warn`).

use std::{fs::OpenOptions, path::Path, sync::Mutex};

use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with timestamps.
    Json,
}

/// Installs the global subscriber. A log file is appended to, never
/// truncated, so a restart keeps the history.
pub fn init(format: LogFormat, file: Option<&Path>) -> Result<(), String> {
    let filter =
        EnvFilter::try_from_env("AIRLOCK_LOG").unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match (format, file) {
        (LogFormat::Text, None) => builder
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .without_time()
            .init(),
        (LogFormat::Json, None) => builder.json().with_writer(std::io::stderr).init(),
        (format, Some(path)) => {
            let out = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open the log file {}: {e}", path.display()))?;
            let writer = Mutex::new(out);
            match format {
                LogFormat::Text => builder.with_ansi(false).with_writer(writer).init(),
                LogFormat::Json => builder.json().with_writer(writer).init(),
            }
        }
    }
    Ok(())
}
