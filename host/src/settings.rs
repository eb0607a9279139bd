//! Where Airlock's configuration comes from: defaults, then a TOML file
//! (`--config` / `AIRLOCK_CONFIG`), then `AIRLOCK_*` environment variables,
//! then command-line flags — each later source overriding the earlier.
//! Every key is documented in `docs/CONFIGURATION.md`.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use airlock_gateway::{
    config::{ApprovalConfig, RateConfig},
    policy::{Grant, PolicyConfig},
    GatewayConfig,
};
use airlock_proxmox::backend::ProxmoxConfig;
use airlock_sandbox::{Limits, Mode, SandboxConfig};
use airlock_state::{default_state_dir, NoStateDir, Place, PostgresConfig};
use clap::Args;
use serde::Deserialize;

/// Where, below the state directory, a configuration without a backend
/// keeps the simulated cluster's approvals and audit log.
pub const SIMULATED_STATE: &str = "simulated";

/// The file's shape; see `docs/CONFIGURATION.md`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigFile {
    /// Where approvals and (by default) the audit log live.
    pub state_dir: Option<PathBuf>,
    /// The enrollment file (`serve --http` keys, `enroll`, `revoke`)
    /// when neither `--enrollment`/`--file` nor `AIRLOCK_ENROLLMENT`
    /// names one: the Debian package's conffile names the service's.
    pub enrollment: Option<PathBuf>,
    pub sandbox: SandboxConfig,
    pub limits: Limits,
    pub policy: PolicySection,
    pub identities: BTreeMap<String, Grant>,
    pub approval: ApprovalConfig,
    pub rate: RateConfig,
    pub audit: AuditSection,
    /// Where approvals, the audit chain and rate buckets live.
    pub state: StateSection,
    /// Proxmox VE clusters; see docs/CONFIGURATION.md.
    pub proxmox: Option<ProxmoxConfig>,
    /// A QuoxCORE collector; see docs/CONFIGURATION.md.
    pub collector: Option<airlock_collector::CollectorConfig>,
    /// Accept OAuth access tokens over HTTP; see docs/DEPLOYMENT.md.
    pub oauth: Option<airlock_oauth::OAuthConfig>,
    /// The operator console at `/console` on `serve --http`; see
    /// docs/DEPLOYMENT.md.
    pub console: Option<airlock_console::ConsoleConfig>,
    /// Runbooks; see docs/CONFIGURATION.md.
    pub runbooks: RunbooksSection,
    /// Removed: `[backends.demo]` served an in-memory fleet with tool
    /// names of its own. Kept only to refuse it with a message that says
    /// what replaced it (see [`ConfigFile::check_removed`]).
    #[serde(rename = "backends")]
    pub removed_backends: Option<toml::Value>,
    /// How an operator approves requests for this configuration (not a
    /// file setting: it names the file the configuration came from).
    #[serde(skip)]
    pub approve_command: Option<String>,
    /// Set when the backend is the simulated cluster (`demo::simulate`):
    /// its state then stays in this machine's files even when
    /// `AIRLOCK_STATE_URL` or `AIRLOCK_AUDIT_FILE` name a real
    /// deployment's, so an approval granted in a demo can never let the
    /// same call run against a real cluster, and demo lines never join a
    /// real audit chain.
    #[serde(skip)]
    pub simulated: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicySection {
    pub read_only: bool,
    pub deny: BTreeSet<String>,
}

/// `[runbooks]`: what a runbook's call outside its file does.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunbooksSection {
    /// `"refuse"` (the default) or `"ask"`.
    pub outside_bounds: airlock_runbooks::runbook::Outside,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSection {
    /// The audit log; default `<state_dir>/audit.jsonl`.
    pub file: Option<PathBuf>,
}

/// `[state]`: this machine's files (`sqlite`, the default) or a
/// PostgreSQL database the replicas of a deployment share.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateSection {
    pub backend: StateBackend,
    /// `postgres://USER@HOST:PORT/DATABASE`, without a password (that
    /// goes in `password_file`, or the whole URL in `AIRLOCK_STATE_URL`).
    pub url: Option<String>,
    pub password_file: Option<PathBuf>,
    /// Connections one replica keeps open at most (default 8).
    pub pool_size: Option<usize>,
    /// Bound on connecting and on each statement, in ms (default 5000).
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    #[default]
    Sqlite,
    Postgres,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot read {path}, the configuration every command uses when none is named (the service's, readable by root and the airlock group): run the command as the service's user, `sudo -u airlock airlock ...`, or name a configuration of your own with --config FILE (AIRLOCK_CONFIG); --config /dev/null runs with none")]
    SystemUnreadable { path: String },
    #[error("config file {path} is not valid: {message}")]
    Parse { path: String, message: String },
    #[error("environment variable {name}: {message}")]
    Env { name: &'static str, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    NoStateDir(#[from] NoStateDir),
}

/// The configuration a packaged install keeps (`packaging/deb`), which
/// commands read when no `--config` or `AIRLOCK_CONFIG` names another, so
/// that an operator's `airlock approvals approve` acts on the service's
/// state, not on a directory of their own.
pub const SYSTEM_CONFIG: &str = "/etc/airlock/airlock.toml";

/// The configuration file to read: the one named, else
/// [`SYSTEM_CONFIG`] when it exists (even when this user may not read
/// it: that is refused by [`load_file`] rather than passed over, since
/// going on without it would act on other state than the service's).
pub fn config_path(named: Option<&Path>) -> Option<PathBuf> {
    config_path_in(named, Path::new(SYSTEM_CONFIG))
}

fn config_path_in(named: Option<&Path>, system: &Path) -> Option<PathBuf> {
    match named {
        Some(p) => Some(p.to_path_buf()),
        // Only "not there" passes it over: a file this user may not even
        // look at (the package's /etc/airlock is root:airlock 0750) is
        // the service's, and reading it is refused with what to do.
        None => match std::fs::symlink_metadata(system) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            _ => Some(system.to_path_buf()),
        },
    }
}

pub fn load_file(path: Option<&Path>) -> Result<ConfigFile, SettingsError> {
    let Some(path) = path else {
        return Ok(ConfigFile {
            approve_command: Some(format!("{} approvals approve", shell_word(&program()))),
            ..ConfigFile::default()
        });
    };
    let text = std::fs::read_to_string(path).map_err(|source| {
        if path == Path::new(SYSTEM_CONFIG) && source.kind() != std::io::ErrorKind::NotFound {
            SettingsError::SystemUnreadable {
                path: path.display().to_string(),
            }
        } else {
            SettingsError::Read {
                path: path.display().to_string(),
                source,
            }
        }
    })?;
    let mut file: ConfigFile = toml::from_str(&text).map_err(|e| SettingsError::Parse {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    file.check_removed()
        .map_err(|message| SettingsError::Parse {
            path: path.display().to_string(),
            message,
        })?;
    file.approval
        .check()
        .and_then(|()| file.rate.check())
        .map_err(|message| SettingsError::Parse {
            path: path.display().to_string(),
            message,
        })?;
    if let Some(oauth) = &file.oauth {
        oauth.check().map_err(|e| SettingsError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    }
    if let Some(console) = &file.console {
        console
            .check()
            .and_then(|()| match &file.oauth {
                Some(oauth) => console.check_with_oauth(oauth),
                None => Ok(()),
            })
            .map_err(|message| SettingsError::Parse {
                path: path.display().to_string(),
                message,
            })?;
    }
    file.approve_command = Some(if path == Path::new(SYSTEM_CONFIG) {
        // The package's state is the airlock user's own (0700).
        format!(
            "sudo -u airlock {} approvals approve",
            shell_word(&program())
        )
    } else {
        approve_command(&program(), path)
    });
    Ok(file)
}

/// How a person runs this binary again from a shell: `airlock` when that
/// is what `airlock` on `PATH` finds, else the binary's full path (a
/// build from a checkout, which is on no `PATH`), so every command
/// Airlock prints runs as printed.
pub fn program() -> String {
    let Ok(me) = std::env::current_exe().and_then(|p| p.canonicalize()) else {
        return "airlock".into();
    };
    let on_path = std::env::var_os("PATH").and_then(|dirs| {
        std::env::split_paths(&dirs)
            .map(|d| d.join("airlock"))
            .find(|p| p.is_file())
    });
    match on_path.and_then(|p| p.canonicalize().ok()) {
        Some(found) if found == me => "airlock".into(),
        _ => me.display().to_string(),
    }
}

/// `PROGRAM --config PATH approvals approve`, with PATH absolute and
/// quoted for a POSIX shell when it needs to be, so the command reaches
/// the same approval store from any directory.
pub fn approve_command(program: &str, config: &Path) -> String {
    let path = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    format!(
        "{} --config {} approvals approve",
        shell_word(program),
        shell_word(&path.display().to_string())
    )
}

fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%=,".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl ConfigFile {
    /// The state directory: the file's `state_dir`, else `AIRLOCK_STATE_DIR`
    /// / XDG state home / `~/.local/state/airlock`; an error when none is
    /// set (never a shared fallback such as `/tmp`).
    ///
    /// A configuration without a backend runs against the simulated
    /// cluster, whose tool names are a real cluster's: its approvals and
    /// audit live in `simulated/` below that directory, so an approval
    /// granted in a simulation can never be used against a real cluster
    /// that shares the state directory, and the two audit chains stay apart.
    pub fn state_dir(&self) -> Result<PathBuf, SettingsError> {
        let base = match &self.state_dir {
            Some(d) => d.clone(),
            None => default_state_dir().map_err(SettingsError::NoStateDir)?,
        };
        Ok(if self.configures_backend() {
            base
        } else {
            base.join(SIMULATED_STATE)
        })
    }

    /// Whether the file names a backend (a Proxmox target or a
    /// collector). Without one, commands run against the simulated
    /// cluster, as `airlock demo` does (see `demo::simulate`).
    pub fn configures_backend(&self) -> bool {
        self.proxmox.is_some() || self.collector.is_some()
    }

    /// Sections that were removed, refused with what replaced them.
    fn check_removed(&self) -> Result<(), String> {
        if self.removed_backends.is_some() {
            return Err(
                "[backends] (the in-memory demo fleet and its tools list_nodes, \
                list_guests, stop_guest, ...) was removed: without [proxmox] or [collector], \
                Airlock runs against the simulated Proxmox VE cluster, whose tools have the \
                same names as on a real cluster (node_list, vm_list, vm_stop, ...). \
                Delete the [backends] section."
                    .into(),
            );
        }
        Ok(())
    }

    /// The gateway's settings and where its state lives, with
    /// `AIRLOCK_READ_ONLY`, `AIRLOCK_AUDIT_FILE` and `AIRLOCK_STATE_URL`
    /// applied.
    pub fn gateway(&self) -> Result<(GatewayConfig, Place), SettingsError> {
        let state_dir = self.state_dir()?;
        let approvals_db = state_dir.join("approvals.db");
        let mut audit_file = state_dir.join("audit.jsonl");
        let mut config = GatewayConfig {
            policy: PolicyConfig {
                read_only: self.policy.read_only,
                deny: self.policy.deny.clone(),
                identities: self.identities.clone(),
            },
            approval: self.approval.clone(),
            rate: self.rate.clone(),
            runbook_outside: self.runbooks.outside_bounds,
            ..GatewayConfig::default()
        };
        if let Some(c) = &self.approve_command {
            config.approve_command = c.clone();
        }
        if let Some(f) = &self.audit.file {
            audit_file = f.clone();
        }
        if let Some(v) = env_bool("AIRLOCK_READ_ONLY")? {
            config.policy.read_only = v;
        }
        let env_audit = std::env::var_os("AIRLOCK_AUDIT_FILE").filter(|f| !f.is_empty());
        let env_state = std::env::var("AIRLOCK_STATE_URL")
            .ok()
            .filter(|u| !u.is_empty());
        if self.simulated {
            if env_audit.is_some()
                || env_state.is_some()
                || self.state.backend != StateBackend::Sqlite
            {
                tracing::warn!(
                    audit = %audit_file.display(),
                    "the simulated cluster keeps its approvals and audit in its own state directory; AIRLOCK_AUDIT_FILE, AIRLOCK_STATE_URL and [state] are for a real cluster's and are not used"
                );
            }
            let place = Place::Files {
                approvals_db,
                audit_file,
            };
            return Ok((config, place));
        }
        if let Some(f) = env_audit {
            audit_file = PathBuf::from(f);
        }
        let place = match self.postgres(env_state)? {
            Some(pg) => Place::Postgres(pg),
            None => Place::Files {
                approvals_db,
                audit_file,
            },
        };
        Ok((config, place))
    }

    /// `[state]` for PostgreSQL, or `None` for this machine's files.
    /// `env_url` (`AIRLOCK_STATE_URL`) wins over the file's `url` and
    /// alone selects PostgreSQL; it is the one place a password may be
    /// written into the URL itself.
    fn postgres(&self, env_url: Option<String>) -> Result<Option<PostgresConfig>, SettingsError> {
        let s = &self.state;
        let env_url = env_url.filter(|u| !u.is_empty());
        if s.backend == StateBackend::Sqlite && env_url.is_none() {
            if s.url.is_some() || s.password_file.is_some() {
                return Err(SettingsError::Invalid(
                    "[state] url and password_file are for backend = \"postgres\"; add that line, or remove them to keep the state in this machine's files".into(),
                ));
            }
            return Ok(None);
        }
        let url = match (env_url, &s.url) {
            (Some(u), _) => u,
            (None, Some(u)) => {
                if PostgresConfig::url_has_password(u) {
                    return Err(SettingsError::Invalid(
                        "[state] url carries a password; a configuration file is no place for one: put it in a file named by password_file (mode 0600), or give the whole URL in AIRLOCK_STATE_URL".into(),
                    ));
                }
                u.clone()
            }
            (None, None) => {
                return Err(SettingsError::Invalid(
                    "[state] backend = \"postgres\" needs url = \"postgres://USER@HOST:PORT/DATABASE\" (or AIRLOCK_STATE_URL)".into(),
                ))
            }
        };
        if !self.configures_backend() {
            return Err(SettingsError::Invalid(
                "[state] backend = \"postgres\" is for a deployment's real backends, and this configuration has none ([proxmox] or [collector]), so it would run on the simulated cluster; configure a backend, or drop [state] to simulate on this machine's files".into(),
            ));
        }
        let mut pg = PostgresConfig::new(url);
        pg.password_file = s.password_file.clone();
        if let Some(n) = s.pool_size {
            if n == 0 {
                return Err(SettingsError::Invalid(
                    "[state] pool_size = 0 leaves no connection; use at least 1 (default 8)".into(),
                ));
            }
            pg.pool_size = n;
        }
        if let Some(ms) = s.timeout_ms {
            if ms < 100 {
                return Err(SettingsError::Invalid(
                    format!("[state] timeout_ms = {ms} would fail statements a healthy database answers; use at least 100 (default 5000)"),
                ));
            }
            pg.timeout = std::time::Duration::from_millis(ms);
        }
        Ok(Some(pg))
    }
}

fn env_bool(name: &'static str) -> Result<Option<bool>, SettingsError> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Some(true)),
            "0" | "false" | "no" | "off" | "" => Ok(Some(false)),
            _ => Err(SettingsError::Env {
                name,
                message: format!("`{v}` is not a boolean; use true or false"),
            }),
        },
    }
}

/// Sandbox settings and limits as flags. Every one also reads an
/// `AIRLOCK_*` variable; byte sizes accept `KiB`, `MiB` and `GiB`.
#[derive(Debug, Default, Args)]
pub struct SandboxFlags {
    /// `fresh` (new instance per execution) or `reuse` (instances serve
    /// several executions, each in a new realm).
    #[arg(long, env = "AIRLOCK_MODE")]
    pub mode: Option<Mode>,
    /// Executions one instance serves in reuse mode.
    #[arg(long, env = "AIRLOCK_REUSE_RUNS")]
    pub reuse_runs: Option<u32>,
    /// Executions running at once.
    #[arg(long, env = "AIRLOCK_EXECUTIONS_IN_FLIGHT")]
    pub executions_in_flight: Option<u32>,
    /// Executions allowed to wait for a slot.
    #[arg(long, env = "AIRLOCK_QUEUE_DEPTH")]
    pub queue_depth: Option<u32>,
    /// Longest wait for a slot, in ms.
    #[arg(long, env = "AIRLOCK_QUEUE_WAIT_MS")]
    pub queue_wait_ms: Option<u64>,
    /// Executions of one identity running at once (default: half of
    /// executions in flight).
    #[arg(long, env = "AIRLOCK_EXECUTIONS_PER_IDENTITY")]
    pub executions_per_identity: Option<u32>,
    /// Executions of one identity waiting for a slot (default: half of
    /// the queue depth).
    #[arg(long, env = "AIRLOCK_QUEUED_PER_IDENTITY")]
    pub queued_per_identity: Option<u32>,
    /// Where the compiled guest is cached.
    #[arg(long, env = "AIRLOCK_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Start instances without the pre-initialised realm (slower; for
    /// measuring what the snapshot saves).
    #[arg(long)]
    pub no_snapshot: bool,

    /// Largest script accepted.
    #[arg(long, env = "AIRLOCK_SOURCE_BYTES", value_parser = parse_bytes)]
    pub source_bytes: Option<u64>,
    /// Guest memory cap.
    #[arg(long, env = "AIRLOCK_MEMORY_BYTES", value_parser = parse_bytes)]
    pub memory_bytes: Option<u64>,
    /// Wall-clock budget per execution, waiting on tools included.
    #[arg(long, env = "AIRLOCK_WALL_TIME_MS")]
    pub wall_time_ms: Option<u64>,
    /// Instruction budget (builds the engine with fuel metering).
    #[arg(long, env = "AIRLOCK_FUEL")]
    pub fuel: Option<u64>,
    /// Tool calls one execution may start.
    #[arg(long, env = "AIRLOCK_TOOL_CALLS")]
    pub tool_calls: Option<u32>,
    /// Tool calls running at once per execution (more wait their turn).
    #[arg(long, env = "AIRLOCK_CALLS_IN_FLIGHT")]
    pub calls_in_flight: Option<u32>,
    /// Longest one tool call may take, in ms.
    #[arg(long, env = "AIRLOCK_CALL_TIMEOUT_MS")]
    pub call_timeout_ms: Option<u64>,
    /// Largest result returned; larger ones are truncated to valid JSON.
    #[arg(long, env = "AIRLOCK_RESULT_BYTES", value_parser = parse_bytes)]
    pub result_bytes: Option<u64>,
    /// Console output kept per execution (each line costs 64 bytes more
    /// than its text).
    #[arg(long, env = "AIRLOCK_LOG_BYTES", value_parser = parse_bytes)]
    pub log_bytes: Option<u64>,
    /// Tool-call argument bytes one execution may send, all calls together.
    #[arg(long, env = "AIRLOCK_ARGS_BYTES", value_parser = parse_bytes)]
    pub args_bytes: Option<u64>,
    /// Timers (setTimeout) armed at once.
    #[arg(long, env = "AIRLOCK_TIMERS")]
    pub timers: Option<u32>,
    /// What a durable execution's journal may hold (tool results taken,
    /// clock readings, random draws).
    #[arg(long, env = "AIRLOCK_JOURNAL_BYTES", value_parser = parse_bytes)]
    pub journal_bytes: Option<u64>,
    /// Longest an `execute` of a durable execution holds its answer, in
    /// ms; then it says what the execution waits for, to be followed.
    #[arg(long, env = "AIRLOCK_ANSWER_WITHIN_MS")]
    pub answer_within_ms: Option<u64>,
    /// Longest a durable execution lives from its first start, waiting
    /// included, in ms; then it ends (`LifetimeExceeded`).
    #[arg(long, env = "AIRLOCK_LIFETIME_MS")]
    pub lifetime_ms: Option<u64>,
}

impl SandboxFlags {
    /// Applies the flags over the file's sandbox settings and limits and
    /// checks the result.
    pub fn resolve(&self, file: &ConfigFile) -> Result<(SandboxConfig, Limits), SettingsError> {
        let (mut sandbox, mut limits) = (file.sandbox.clone(), file.limits.clone());
        set(&mut sandbox.mode, self.mode);
        set(&mut sandbox.reuse_runs, self.reuse_runs);
        set(
            &mut sandbox.capacity.executions_in_flight,
            self.executions_in_flight,
        );
        set(&mut sandbox.capacity.queue_depth, self.queue_depth);
        set(&mut sandbox.capacity.queue_wait_ms, self.queue_wait_ms);
        if let Some(n) = self.executions_per_identity {
            sandbox.capacity.executions_per_identity = Some(n);
        }
        if let Some(n) = self.queued_per_identity {
            sandbox.capacity.queued_per_identity = Some(n);
        }
        if let Some(dir) = &self.cache_dir {
            sandbox.cache_dir = Some(dir.clone());
        }
        if self.no_snapshot {
            sandbox.snapshot = false;
        }
        set(&mut limits.source_bytes, self.source_bytes);
        set(&mut limits.memory_bytes, self.memory_bytes);
        set(&mut limits.wall_time_ms, self.wall_time_ms);
        set(&mut limits.tool_calls, self.tool_calls);
        set(&mut limits.calls_in_flight, self.calls_in_flight);
        set(&mut limits.call_timeout_ms, self.call_timeout_ms);
        set(&mut limits.result_bytes, self.result_bytes);
        set(&mut limits.log_bytes, self.log_bytes);
        set(&mut limits.args_bytes, self.args_bytes);
        set(&mut limits.timers, self.timers);
        set(&mut limits.journal_bytes, self.journal_bytes);
        set(&mut limits.answer_within_ms, self.answer_within_ms);
        set(&mut limits.lifetime_ms, self.lifetime_ms);
        if self.fuel.is_some() {
            limits.fuel = self.fuel;
        }
        if limits.fuel.is_some() {
            sandbox.fuel_metering = true;
        }
        limits
            .validate()
            .map_err(|e| SettingsError::Invalid(e.to_string()))?;
        sandbox
            .capacity
            .validate()
            .map_err(|e| SettingsError::Invalid(e.to_string()))?;
        let rate = &file.rate;
        let longest = sandbox
            .capacity
            .queue_wait_ms
            .saturating_add(limits.wall_time_ms);
        if rate.executions_per_identity > 0 && rate.execution_hold_ms <= longest {
            return Err(SettingsError::Invalid(format!(
                "rate.execution_hold_ms = {} must be longer than queue_wait_ms + wall_time_ms ({longest}): a place would be freed while its execution still runs; raise it",
                rate.execution_hold_ms
            )));
        }
        Ok((sandbox, limits))
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

pub use airlock_sandbox::parse_bytes;

#[cfg(test)]
mod tests {

    #[test]
    fn the_system_configuration_is_the_default_only_when_it_exists_and_none_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("airlock.toml");
        let named = dir.path().join("mine.toml");
        assert_eq!(config_path_in(None, &system), None, "no file, no default");
        std::fs::write(&system, "").unwrap();
        assert_eq!(config_path_in(None, &system), Some(system.clone()));
        assert_eq!(
            config_path_in(Some(&named), &system),
            Some(named.clone()),
            "a named file wins"
        );
        // One this user may not look at is still the default (its
        // reading is then refused), never passed over: a directory that
        // may not be searched, unless this is root, whom nothing stops.
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        let hidden = closed.join("airlock.toml");
        std::fs::write(&hidden, "").unwrap();
        std::fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap();
        assert_eq!(config_path_in(None, &hidden), Some(hidden.clone()));
        std::fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
    }
    use super::*;
    use airlock_catalog::Tier;
    use airlock_gateway::Mode as Access;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("1 GiB"), Ok(1 << 30));
        assert!(parse_bytes("12 parsecs").unwrap_err().contains("unit"));
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn the_file_takes_sizes_as_flags_do() {
        let file: ConfigFile =
            toml::from_str("[limits]\nmemory_bytes = \"64MiB\"\nlog_bytes = 4096\n").unwrap();
        assert_eq!(file.limits.memory_bytes, 64 << 20);
        assert_eq!(file.limits.log_bytes, 4096);
        let err = toml::from_str::<ConfigFile>("[limits]\nresult_bytes = \"12 parsecs\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("result_bytes") && err.contains("unit"),
            "{err}"
        );
        let err = toml::from_str::<ConfigFile>("[limits]\nargs_bytes = -1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("args_bytes") && err.contains("64MiB"), "{err}");
    }

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("airlock.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn a_place_held_shorter_than_an_execution_can_run_is_refused() {
        let (_d, path) = write(
            "[rate]\nexecutions_per_identity = 4\nexecution_hold_ms = 30000\n[limits]\nwall_time_ms = 60000\n",
        );
        let file = load_file(Some(&path)).unwrap();
        let e = SandboxFlags::default()
            .resolve(&file)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rate.execution_hold_ms = 30000") && e.contains("70000"),
            "{e}"
        );
        // The sandbox's own per-identity share flags resolve too.
        let flags = SandboxFlags {
            wall_time_ms: Some(1000),
            executions_per_identity: Some(2),
            ..SandboxFlags::default()
        };
        let (sandbox, _) = flags.resolve(&file).unwrap();
        assert_eq!(sandbox.capacity.executions_per_identity, Some(2));
    }

    #[test]
    fn a_lifetime_shorter_than_a_run_or_longer_than_thirty_days_is_refused() {
        let (_d, path) = write("[limits]\nwall_time_ms = 60000\nlifetime_ms = 30000\n");
        let file = load_file(Some(&path)).unwrap();
        let e = SandboxFlags::default()
            .resolve(&file)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`lifetime_ms` is 30000") && e.contains("`wall_time_ms` (60000)"),
            "{e}"
        );
        let flags = SandboxFlags {
            lifetime_ms: Some(31 * 24 * 3600 * 1000),
            ..SandboxFlags::default()
        };
        let e = flags.resolve(&file).unwrap_err().to_string();
        assert!(e.contains("lifetime_ms") && e.contains("2592000000"), "{e}");
        let flags = SandboxFlags {
            lifetime_ms: Some(3_600_000),
            ..SandboxFlags::default()
        };
        assert_eq!(
            flags.resolve(&file).unwrap().1.lifetime(),
            std::time::Duration::from_secs(3600)
        );
    }

    #[test]
    fn file_then_flags() {
        let (_d, path) = write(
            "[sandbox]\nmode = \"reuse\"\n[sandbox.capacity]\nexecutions_in_flight = 3\n[limits]\nwall_time_ms = 1234\ntool_calls = 7\n",
        );
        let file = load_file(Some(&path)).unwrap();
        let flags = SandboxFlags {
            tool_calls: Some(9),
            ..SandboxFlags::default()
        };
        let (sandbox, limits) = flags.resolve(&file).unwrap();
        assert_eq!(sandbox.mode, Mode::Reuse);
        assert_eq!(sandbox.capacity.executions_in_flight, 3);
        assert_eq!(limits.wall_time_ms, 1234, "from the file");
        assert_eq!(limits.tool_calls, 9, "the flag wins");
        assert_eq!(
            limits.memory_bytes,
            Limits::default().memory_bytes,
            "default kept"
        );
    }

    #[test]
    fn gateway_sections() {
        let (dir, path) = write(&format!(
            "state_dir = \"{}\"\n[policy]\nread_only = true\ndeny = [\"vm_delete\"]\n\
             [identities.alice]\nmode = \"rw\"\ndeny = [\"vm_stop\"]\n\
             [approval]\ntiers = [\"admin\"]\nttl_secs = 60\nmax_open_per_identity = 4\nin_client = [\"operate\"]\n\
             [identities.otto]\nmode = \"operator\"\napprove_in_client = false\n[rate]\ncalls_per_minute = 5\n\
             [audit]\nfile = \"/tmp/x/audit.jsonl\"\n",
            "/srv/airlock"
        ));
        let file = load_file(Some(&path)).unwrap();
        let (g, place) = file.gateway().unwrap();
        assert!(g.policy.read_only);
        assert!(g.policy.deny.contains("vm_delete"));
        assert_eq!(g.policy.identities["alice"].mode, Access::Rw);
        assert_eq!(g.approval.tiers, [Tier::Admin]);
        assert_eq!(g.approval.ttl_secs, 60);
        assert_eq!(g.approval.max_open_per_identity, 4);
        assert_eq!(g.approval.in_client, [Tier::Operate]);
        assert!(!g.policy.identities["otto"].approve_in_client);
        assert!(g.policy.identities["alice"].approve_in_client, "default");
        assert_eq!(g.rate.calls_per_minute, 5);
        assert_eq!(
            place,
            Place::Files {
                approvals_db: PathBuf::from("/srv/airlock/simulated/approvals.db"),
                audit_file: PathBuf::from("/tmp/x/audit.jsonl"),
            }
        );
        assert!(
            !file.configures_backend(),
            "no proxmox target, no collector: commands run on the simulator"
        );
        assert_eq!(
            file.state_dir().unwrap(),
            PathBuf::from("/srv/airlock/simulated"),
            "a simulation's state stays apart from a real cluster's"
        );
        drop(dir);
    }

    #[test]
    fn bad_files_name_the_problem() {
        let (_d, path) = write("[limits]\nwall_time = 5\n");
        let err = load_file(Some(&path)).unwrap_err().to_string();
        assert!(err.contains("wall_time"), "{err}");
        let (_d, path) = write("[identities.bob]\nmode = \"root\"\n");
        let err = load_file(Some(&path)).unwrap_err().to_string();
        assert!(err.contains("root"), "{err}");
        let err = SandboxFlags {
            tool_calls: Some(0),
            ..SandboxFlags::default()
        }
        .resolve(&ConfigFile::default())
        .unwrap_err()
        .to_string();
        assert!(err.contains("tool_calls"), "{err}");
    }

    #[test]
    fn the_removed_demo_fleet_section_says_what_replaced_it() {
        let (_d, path) = write("[backends.demo]\nlatency_ms = 0\n");
        let err = load_file(Some(&path)).unwrap_err().to_string();
        for part in [
            "[backends]",
            "removed",
            "simulated Proxmox VE cluster",
            "vm_list",
            "Delete",
        ] {
            assert!(err.contains(part), "{part}: {err}");
        }
    }

    #[test]
    fn state_section() {
        let backend = "[proxmox.targets.a]\nurl = \"https://pve:8006\"\n";
        let parse = |state: &str, env: Option<&str>| {
            let (_d, path) = write(&format!("{backend}{state}"));
            load_file(Some(&path))
                .unwrap()
                .postgres(env.map(str::to_string))
        };
        // The default: this machine's files.
        assert_eq!(parse("", None).unwrap(), None);
        let pg = parse(
            "[state]\nbackend = \"postgres\"\nurl = \"postgres://airlock@db:5432/airlock\"\n\
             password_file = \"/etc/airlock/pg\"\npool_size = 4\ntimeout_ms = 1500\n",
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(pg.url, "postgres://airlock@db:5432/airlock");
        assert_eq!(pg.password_file, Some(PathBuf::from("/etc/airlock/pg")));
        assert_eq!((pg.pool_size, pg.timeout.as_millis()), (4, 1500));
        // The environment's URL wins and alone selects PostgreSQL; it may
        // carry the password, which never shows.
        let env = parse("", Some("postgres://a:s3cret@db/x"))
            .unwrap()
            .unwrap();
        assert_eq!(env.url, "postgres://a:s3cret@db/x");
        assert!(!format!("{env:?}").contains("s3cret"), "{env:?}");
        assert_eq!(env.describe(), "postgresql://a@db:5432/x");

        let refused = |state: &str, needle: &str| {
            let e = parse(state, None).unwrap_err().to_string();
            assert!(e.contains(needle), "{state}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        };
        refused("[state]\nbackend = \"postgres\"\n", "needs url");
        refused(
            "[state]\nbackend = \"postgres\"\nurl = \"postgres://a:s3cret@db/x\"\n",
            "password_file",
        );
        refused(
            "[state]\nurl = \"postgres://a@db/x\"\n",
            "backend = \"postgres\"",
        );
        refused(
            "[state]\nbackend = \"postgres\"\nurl = \"postgres://a@db/x\"\npool_size = 0\n",
            "pool_size",
        );
        refused(
            "[state]\nbackend = \"postgres\"\nurl = \"postgres://a@db/x\"\ntimeout_ms = 5\n",
            "timeout_ms",
        );
        let (_d, path) = write("[state]\nbackend = \"mysql\"\n");
        let e = load_file(Some(&path)).unwrap_err().to_string();
        assert!(e.contains("sqlite") && e.contains("postgres"), "{e}");
        // Without a backend it would simulate, and a simulation's state
        // stays on this machine.
        let (_d, path) = write("[state]\nbackend = \"postgres\"\nurl = \"postgres://a@db/x\"\n");
        let e = load_file(Some(&path)).unwrap().postgres(None).unwrap_err();
        assert!(e.to_string().contains("simulated"), "{e}");
    }
}
