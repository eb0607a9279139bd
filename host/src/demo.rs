//! The simulated cluster as a ready-made configuration: `airlock demo` runs
//! scripts against it in-process with zero configuration, and `airlock sim`
//! serves it on a port and writes a configuration file that points at it,
//! so it can be used exactly like a real cluster.

use std::{collections::BTreeMap, path::Path, time::Duration};

use airlock_tools::{
    collector::{sim::CollectorSim, CollectorConfig, TierRule},
    policy::{Grant, Mode},
    proxmox::backend::{ProxmoxConfig, TargetConfig},
    sim::{Role, SimConfig, Simulator},
    Tier,
};

use crate::settings::ConfigFile;

/// Identities of the demo configuration: who they are, their mode, and the
/// simulator token they act with.
pub const IDENTITIES: &[(&str, Mode, Role)] = &[
    ("local", Mode::Ro, Role::Reader),
    ("rita", Mode::Ro, Role::Reader),
    ("olga", Mode::Operator, Role::Operator),
    ("alice", Mode::Rw, Role::Admin),
];

/// Writes one token file per identity into `dir` (mode 0600) and returns
/// the `[proxmox]` section for the simulator.
pub fn proxmox_section(
    sim: &Simulator,
    config: &SimConfig,
    dir: &Path,
) -> std::io::Result<ProxmoxConfig> {
    std::fs::create_dir_all(dir)?;
    let mut tokens = std::collections::HashMap::new();
    for (identity, _, role) in IDENTITIES {
        let token = config
            .token(*role)
            .expect("the simulator has a token per role");
        let path = dir.join(format!("{identity}.token"));
        write_private(&path, &token.line())?;
        tokens.insert(identity.to_string(), path);
    }
    let mut targets = BTreeMap::new();
    targets.insert(
        "sim".to_string(),
        TargetConfig {
            url: sim.url(),
            fingerprint: Some(sim.fingerprint().to_string()),
            tokens,
            ..TargetConfig::default()
        },
    );
    Ok(ProxmoxConfig {
        targets,
        ..ProxmoxConfig::default()
    })
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        std::io::Write::write_all(&mut f, text.as_bytes())
    }
    #[cfg(not(unix))]
    std::fs::write(path, text)
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
    let sim = Simulator::start(&config).await.map_err(|e| e.to_string())?;
    Ok((sim, config))
}

/// The TOML `airlock sim` writes, pointing at the running simulator.
pub fn config_toml(proxmox: &ProxmoxConfig, state_dir: &Path) -> String {
    let mut out = String::from(
        "# Written by `airlock sim` (or the demo): a configuration for the simulated cluster.\n",
    );
    out.push_str(&format!(
        "state_dir = {:?}\n\n",
        state_dir.display().to_string()
    ));
    for (identity, mode, _) in IDENTITIES {
        out.push_str(&format!(
            "[identities.{identity}]\nmode = \"{}\"\n\n",
            mode.as_str()
        ));
    }
    for (name, t) in &proxmox.targets {
        out.push_str(&format!("[proxmox.targets.{name}]\nurl = {:?}\n", t.url));
        if let Some(fp) = &t.fingerprint {
            out.push_str(&format!("fingerprint = {fp:?}\n"));
        }
        out.push_str(&format!("\n[proxmox.targets.{name}.tokens]\n"));
        let mut tokens: Vec<_> = t.tokens.iter().collect();
        tokens.sort();
        for (identity, path) in tokens {
            out.push_str(&format!("{identity} = {:?}\n", path.display().to_string()));
        }
    }
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
    std::fs::write(&key_file, &key).map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_written_collector_section_reads_back_as_the_same_settings() {
        let dir = tempfile::tempdir().unwrap();
        let (_sim, config, section) = start_collector(dir.path()).await.unwrap();
        let file: ConfigFile = toml::from_str(&section).unwrap();
        assert_eq!(file.collector, Some(config));
    }
}
