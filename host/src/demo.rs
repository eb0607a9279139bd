//! The simulated cluster as a ready-made configuration. It is what Airlock
//! runs against when a configuration names no backend: `airlock demo`,
//! `serve --demo`, and `exec`, `serve`, `search` and `schema` without a
//! `[proxmox]` target or a `[collector]`; so there is one vocabulary of
//! tool names, the real cluster's. `airlock sim` serves it on a port and
//! writes a configuration file that points at it, so it can be used
//! exactly like a real cluster.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use airlock_catalog::Tier;
use airlock_collector::{CollectorConfig, TierRule};
use airlock_gateway::policy::{Grant, Mode};
use airlock_proxmox::backend::{ProxmoxConfig, TargetConfig};
use airlock_sim::{collector::CollectorSim, Role, SimConfig, Simulator};

use crate::settings::ConfigFile;

/// Identities of the demo configuration: who they are, their mode, and the
/// simulator token they act with.
pub const IDENTITIES: &[(&str, Mode, Role)] = &[
    ("local", Mode::Ro, Role::Reader),
    ("rita", Mode::Ro, Role::Reader),
    ("olga", Mode::Operator, Role::Operator),
    ("alice", Mode::Rw, Role::Admin),
];

/// Writes one token file per demo identity into `dir` (mode 0600) and
/// returns the `[proxmox]` section for the simulator.
pub fn proxmox_section(
    sim: &Simulator,
    config: &SimConfig,
    dir: &Path,
) -> std::io::Result<ProxmoxConfig> {
    let demo = IDENTITIES
        .iter()
        .map(|(identity, _, role)| (identity.to_string(), *role));
    section_for(sim, config, dir, demo)
}

/// The `[proxmox]` section for the simulator, with a token file (mode
/// 0600, in `dir`) of the given role for each identity.
fn section_for(
    sim: &Simulator,
    config: &SimConfig,
    dir: &Path,
    identities: impl IntoIterator<Item = (String, Role)>,
) -> std::io::Result<ProxmoxConfig> {
    std::fs::create_dir_all(dir)?;
    let mut tokens = std::collections::HashMap::new();
    for (identity, role) in identities {
        let token = config
            .token(role)
            .expect("the simulator has a token per role");
        let path = dir.join(format!("{identity}.token"));
        write_private(&path, &token.line())?;
        tokens.insert(identity, path);
    }
    // Identities the file does not list (an OpenID provider's people)
    // act with the token of the mode they are allowed.
    let mut tokens_by_mode = std::collections::HashMap::new();
    for mode in [Mode::Ro, Mode::Operator, Mode::Rw] {
        let token = config
            .token(role_for(mode))
            .expect("the simulator has a token per role");
        // `mode-` keeps these apart from identities' files.
        let path = dir.join(format!("mode-{mode}.token"));
        write_private(&path, &token.line())?;
        tokens_by_mode.insert(mode, path);
    }
    let mut targets = BTreeMap::new();
    targets.insert(
        "sim".to_string(),
        TargetConfig {
            url: sim.url(),
            fingerprint: Some(sim.fingerprint().to_string()),
            tokens,
            tokens_by_mode,
            ..TargetConfig::default()
        },
    );
    Ok(ProxmoxConfig {
        targets,
        ..ProxmoxConfig::default()
    })
}

/// Token and key files, made as `airlock serve` will want them: 0600.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    airlock_edge::credential_file::write(path, text)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// A configuration for the simulator: the Proxmox section, the demo
/// identities with their modes, and `state_dir` for approvals and audit.
pub fn config_file(proxmox: ProxmoxConfig, state_dir: &Path) -> ConfigFile {
    let mut file = ConfigFile {
        state_dir: Some(state_dir.to_path_buf()),
        proxmox: Some(proxmox),
        ..ConfigFile::default()
    };
    for (identity, mode, _) in IDENTITIES {
        file.identities.insert(
            identity.to_string(),
            Grant {
                mode: *mode,
                ..Grant::default()
            },
        );
    }
    file
}

/// Starts the simulator in this process, with tasks that take a moment as
/// on a real cluster.
pub async fn start(task_delay: Duration, port: u16) -> Result<(Simulator, SimConfig), String> {
    let mut config = SimConfig::with_default_tokens(task_delay);
    config.port = port;
    // The API viewer's tree of what the simulator implements: the curated
    // catalog, so the full-catalog generator can be pointed at it.
    config.api_viewer = Some(airlock_proxmox::viewer::apidata_js());
    let sim = Simulator::start(&config).await.map_err(|e| e.to_string())?;
    Ok((sim, config))
}

/// The TOML `airlock sim` writes, pointing at the running simulator.
pub fn config_toml(proxmox: &ProxmoxConfig, state_dir: &Path) -> String {
    let mut out = String::from(
        "# Written by `airlock sim` (or the demo): a configuration for the simulated cluster.\n",
    );
    out.push_str(&format!(
        "state_dir = {}\n\n",
        toml_string(&state_dir.display().to_string())
    ));
    for (identity, mode, _) in IDENTITIES {
        out.push_str(&format!(
            "[identities.{identity}]\nmode = \"{}\"\n\n",
            mode.as_str()
        ));
    }
    for (name, t) in &proxmox.targets {
        out.push_str(&format!(
            "[proxmox.targets.{name}]\nurl = {}\n",
            toml_string(&t.url)
        ));
        if let Some(fp) = &t.fingerprint {
            out.push_str(&format!("fingerprint = {}\n", toml_string(fp)));
        }
        out.push_str(&format!("\n[proxmox.targets.{name}.tokens]\n"));
        let mut tokens: Vec<_> = t.tokens.iter().collect();
        tokens.sort();
        for (identity, path) in tokens {
            out.push_str(&format!(
                "{} = {}\n",
                toml_string(identity),
                toml_string(&path.display().to_string())
            ));
        }
        if !t.tokens_by_mode.is_empty() {
            out.push_str(&format!("\n[proxmox.targets.{name}.tokens_by_mode]\n"));
            for mode in [Mode::Ro, Mode::Operator, Mode::Rw] {
                if let Some(path) = t.tokens_by_mode.get(&mode) {
                    out.push_str(&format!(
                        "{mode} = {}\n",
                        toml_string(&path.display().to_string())
                    ));
                }
            }
        }
    }
    out
}

/// `s` as a one-line TOML basic string, usable as a value or a key
/// (Rust's `{:?}` escapes differently, and the toml crate may pick a
/// multi-line form, which a key cannot take).
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The simulated QuoxCORE collector for `--collector`: started on a free
/// loopback port with a fresh service key (written to `state_dir`), and
/// the `[collector]` settings for it. Its fleet and docker tools are
/// `read`; `ssh_exec` stays `admin` (the default for collector tools).
pub async fn start_collector(
    state_dir: &Path,
) -> Result<(CollectorSim, CollectorConfig, String), String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
    let key = format!("quox-demo-{}", hex::encode(bytes));
    let key_file = state_dir.join("quox.key");
    write_private(&key_file, &key).map_err(|e| e.to_string())?;
    let sim = CollectorSim::start(0, &key)
        .await
        .map_err(|e| e.to_string())?;
    let config = CollectorConfig {
        url: sim.url(),
        service_key_file: Some(key_file.clone()),
        tiers: vec![
            TierRule {
                pattern: "fleet_*".into(),
                tier: Tier::Read,
            },
            TierRule {
                pattern: "docker.*".into(),
                tier: Tier::Read,
            },
        ],
        ..CollectorConfig::default()
    };
    // The same settings as the file's `[collector]` section.
    #[derive(serde::Serialize)]
    struct Section<'a> {
        collector: &'a CollectorConfig,
    }
    let toml = toml::to_string(&Section { collector: &config }).map_err(|e| e.to_string())?;
    Ok((sim, config, format!("\n{toml}")))
}

/// The simulated cluster (and collector) running in this process for one
/// command, with the temporary directory of its token and key files (and,
/// for the demo, its state). Dropping it stops both and removes the
/// directory.
pub struct Simulated {
    pub sim: Simulator,
    pub collector: Option<CollectorSim>,
    _scratch: tempfile::TempDir,
}

/// How to start the simulated systems.
#[derive(Clone, Copy, Debug)]
pub struct SimOptions {
    /// How long a simulated task runs.
    pub task_delay: Duration,
    /// Also start a simulated QuoxCORE collector.
    pub collector: bool,
    /// Keep approvals and the audit log in a temporary state directory of
    /// the run's own (`demo`), instead of the configured one (`exec`
    /// without a backend, so approvals outlive the run as usual).
    pub own_state: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            task_delay: Duration::from_millis(300),
            collector: false,
            own_state: false,
        }
    }
}

/// The simulator role an identity's token gets: the one its mode needs.
fn role_for(mode: Mode) -> Role {
    match mode {
        Mode::Ro => Role::Reader,
        Mode::Operator => Role::Operator,
        Mode::Rw => Role::Admin,
    }
}

/// Starts the simulated cluster and points `file` at it, with a token for
/// every identity of the role its mode needs (an identity the file does not
/// list is read-only, so its token is a reader's). The demo identities
/// (local, rita, olga, alice) are added only when the file defines none, so
/// a configuration's own identities are never joined by an `alice` with
/// mode rw. Everything else in `file` (limits, sandbox, policy) stays.
///
/// With `own_state` (the demo), approvals and audit go to a temporary
/// directory and the approval hint names a written copy of this
/// configuration, so an operator can approve from another shell while the
/// command runs. Without it, they stay in the file's state directory for
/// simulations (`ConfigFile::state_dir`), so an approval outlives the run.
pub async fn simulate(file: &mut ConfigFile, options: SimOptions) -> Result<Simulated, String> {
    if !options.own_state {
        // Fixed before the backend is filled in, which would otherwise
        // make it the real cluster's directory.
        file.state_dir = Some(file.state_dir().map_err(|e| e.to_string())?);
    }
    let (sim, config) = start(options.task_delay, 0)
        .await
        .map_err(|e| format!("cannot start the simulated cluster: {e}"))?;
    file.simulated = true;
    let scratch = private_scratch()?;
    if file.identities.is_empty() {
        // The demo's people may approve their own requests (in their
        // client, on a simulated cluster): the convenience of trying
        // Airlock alone. A configuration's own identities keep four eyes.
        for (identity, mode, _) in IDENTITIES {
            file.identities.insert(
                identity.to_string(),
                Grant {
                    mode: *mode,
                    approve_own: Some(true),
                    ..Grant::default()
                },
            );
        }
    }
    let mut names: Vec<String> = file.identities.keys().cloned().collect();
    names.extend(IDENTITIES.iter().map(|(name, _, _)| name.to_string()));
    names.sort();
    names.dedup();
    let roles = names.into_iter().map(|identity| {
        let mode = file.identities.get(&identity).map_or(Mode::Ro, |g| g.mode);
        (identity, role_for(mode))
    });
    let proxmox = section_for(&sim, &config, &scratch.path().join("tokens"), roles)
        .map_err(|e| format!("cannot write the simulator's token files: {e}"))?;
    let mut toml = config_toml(&proxmox, scratch.path());
    file.proxmox = Some(proxmox);
    let collector = if options.collector {
        let (sim, config, section) = start_collector(scratch.path())
            .await
            .map_err(|e| format!("cannot start the simulated collector: {e}"))?;
        toml.push_str(&section);
        file.collector = Some(config);
        Some(sim)
    } else {
        None
    };
    if options.own_state {
        let config_path = scratch.path().join("airlock.toml");
        std::fs::write(&config_path, toml)
            .map_err(|e| format!("cannot write the simulator's configuration: {e}"))?;
        let program = crate::settings::program();
        file.state_dir = Some(scratch.path().to_path_buf());
        file.audit.file = None;
        file.approve_command = Some(crate::settings::approve_command(&program, &config_path));
    }
    Ok(Simulated {
        sim,
        collector,
        _scratch: scratch,
    })
}

/// Where `airlock demo` keeps approvals and the audit log: the state
/// directory for simulations (`<state>/simulated`, as `exec` without a
/// backend uses), not a temporary one, because the demo exits when its
/// script ends and an approval must outlive that for the script's second
/// run. A small configuration file, `demo.toml`, is (re)written there so
/// the printed `approvals approve` command reaches this directory even
/// when the user's own configuration points elsewhere.
pub fn keep_demo_state(file: &mut ConfigFile) -> Result<PathBuf, String> {
    // The demo reads no configuration: the default one's directory for
    // simulations (`AIRLOCK_STATE_DIR`, XDG state home, ...).
    let dir = ConfigFile::default()
        .state_dir()
        .map_err(|e| e.to_string())?;
    let base = dir
        .parent()
        .ok_or_else(|| format!("the state directory {} has no parent", dir.display()))?
        .to_path_buf();
    airlock_edge::private_files::private_dir(&dir).map_err(|e| e.to_string())?;
    let config_path = dir.join("demo.toml");
    let text = format!(
        "# Written by `airlock demo`: the state directory of its approvals and audit\n\
         # (this one's `simulated/` below it), for `airlock --config THIS approvals ...`.\n\
         state_dir = {}\n",
        toml_string(&base.display().to_string())
    );
    // Written whole (a new file of this process's own) and renamed into
    // place: two demos at once both leave the same complete file.
    let write = || -> std::io::Result<()> {
        let mut scratch = tempfile::NamedTempFile::new_in(&dir)?;
        std::io::Write::write_all(&mut scratch, text.as_bytes())?;
        scratch.persist(&config_path)?;
        Ok(())
    };
    write().map_err(|e| format!("cannot write {}: {e}", config_path.display()))?;
    let program = crate::settings::program();
    file.state_dir = Some(dir.clone());
    file.approve_command = Some(crate::settings::approve_command(&program, &config_path));
    Ok(dir)
}

/// A temporary directory only this user can enter: it holds token files
/// and the collector's key.
fn private_scratch() -> Result<tempfile::TempDir, String> {
    let scratch =
        tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make the temporary directory private: {e}"))?;
    }
    Ok(scratch)
}

/// `file` as it is when it names a backend; otherwise pointed at the
/// simulated cluster (kept running by the returned value), with a warning
/// that says so.
pub async fn or_simulated(file: &mut ConfigFile) -> Result<Option<Simulated>, String> {
    if file.configures_backend() {
        return Ok(None);
    }
    let simulated = simulate(file, SimOptions::default()).await?;
    tracing::warn!(
        url = %simulated.sim.url(),
        "no backend configured ([proxmox] or [collector]): using the simulated Proxmox VE cluster, as `airlock demo` does"
    );
    Ok(Some(simulated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_paths_read_back_whatever_their_characters() {
        let odd = Path::new("/tmp/a \"b\" c\\d/e\u{301}\u{7f}/f#g\nh");
        let mut tokens = std::collections::HashMap::new();
        tokens.insert("o'dd \"one\"".to_string(), odd.join("t.token"));
        let mut targets = BTreeMap::new();
        targets.insert(
            "sim".to_string(),
            TargetConfig {
                url: "https://127.0.0.1:8006".into(),
                tokens,
                ..TargetConfig::default()
            },
        );
        let proxmox = ProxmoxConfig {
            targets,
            ..ProxmoxConfig::default()
        };
        let file: ConfigFile = toml::from_str(&config_toml(&proxmox, odd)).unwrap();
        assert_eq!(file.state_dir.as_deref(), Some(odd));
        assert_eq!(
            file.proxmox.unwrap().targets["sim"].tokens["o'dd \"one\""],
            odd.join("t.token")
        );
    }

    #[tokio::test]
    async fn the_written_collector_section_reads_back_as_the_same_settings() {
        let dir = tempfile::tempdir().unwrap();
        let (_sim, config, section) = start_collector(dir.path()).await.unwrap();
        let file: ConfigFile = toml::from_str(&section).unwrap();
        assert_eq!(file.collector, Some(config));
    }
}
