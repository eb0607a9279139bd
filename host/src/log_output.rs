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

/// The filter for an `AIRLOCK_LOG` value (`info` when unset or invalid).
/// rmcp stays at `warn` unless the value names it: at `debug` rmcp logs
/// every request whole — scripts and the secrets they carry — so a plain
/// `AIRLOCK_LOG=debug` must not switch that on. wasmtime-wasi stays at
/// `error` unless named: it logs a warning for each call of some
/// functions (`sock_accept`, ...), and the guest chooses how many calls
/// it makes, so at `warn` a script could fill the host's log.
fn filter(spec: Option<&str>) -> EnvFilter {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty());
    let parsed = spec.and_then(|s| EnvFilter::try_new(s).ok());
    // Only a value that parsed can name a target.
    let given = spec.filter(|_| parsed.is_some()).unwrap_or("");
    let mut f = parsed.unwrap_or_else(|| EnvFilter::new("info"));
    for (target, level) in [("rmcp", "warn"), ("wasmtime_wasi", "error")] {
        if !given.contains(target) {
            f = f.add_directive(
                format!("{target}={level}")
                    .parse()
                    .expect("static directive"),
            );
        }
    }
    f
}

/// Installs the global subscriber. A log file is appended to, never
/// truncated, so a restart keeps the history.
pub fn init(format: LogFormat, file: Option<&Path>) -> Result<(), String> {
    let filter = filter(std::env::var("AIRLOCK_LOG").ok().as_deref());
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

#[cfg(test)]
mod tests {
    use super::filter;

    #[test]
    fn rmcp_stays_quiet_unless_named() {
        for spec in [
            None,
            Some(""),
            Some("debug"),
            Some("trace"),
            Some("warn,airlock=info"),
        ] {
            let f = filter(spec).to_string();
            assert!(f.contains("rmcp=warn"), "{spec:?}: {f}");
        }
        assert!(filter(Some("trace")).to_string().contains("trace"));
        let f = filter(Some("debug,rmcp=debug")).to_string();
        assert!(f.contains("rmcp=debug") && !f.contains("rmcp=warn"), "{f}");
    }

    #[test]
    fn wasmtime_wasi_warnings_stay_off_unless_named() {
        for spec in [None, Some("warn"), Some("debug"), Some("not a filter[")] {
            let f = filter(spec).to_string();
            assert!(f.contains("wasmtime_wasi=error"), "{spec:?}: {f}");
        }
        let f = filter(Some("info,wasmtime_wasi=debug")).to_string();
        assert!(!f.contains("wasmtime_wasi=error"), "{f}");
    }
}
