//! The Debian package as `packaging/deb/build.sh` builds it (cargo-deb,
//! which the script installs when missing): what it holds, with which
//! modes and owners, its conffile, its maintainer scripts, and that the
//! files in it work (the conffile is a configuration Airlock starts with;
//! the unit is the one `service_unit.rs` checks). Installing it into a
//! clean Debian root is `install.rs`'s; this one needs only dpkg-deb, and
//! says SKIPPED without it.

mod common;

use common::stdout_of;
use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Root's, as tar lists it by number (cargo-deb) or by name (dpkg-deb).
fn root_s(owner: &str) -> bool {
    owner == "0/0" || owner == "root/root"
}

#[test]
fn the_package_holds_the_binary_its_manual_completions_unit_and_conffile() {
    if Command::new("dpkg-deb").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no dpkg-deb (Debian's dpkg) to build or read a package with");
        return;
    }
    let root = repo();
    // The binary under test is the one packaged (target/release/airlock).
    assert_eq!(
        Path::new(env!("CARGO_BIN_EXE_airlock")),
        root.join("target/release/airlock")
    );
    let said = stdout_of(
        Command::new("sh")
            .arg(root.join("packaging/deb/build.sh"))
            .env("AIRLOCK_PREBUILT", "1"),
    );
    let deb = PathBuf::from(said.lines().last().unwrap().trim());
    assert!(
        deb.starts_with(root.join("target/debian")) && deb.exists(),
        "{said}"
    );
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        deb.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&format!("airlock_{version}-1_")),
        "{deb:?}"
    );
    eprintln!(
        "package: {} bytes ({:.1} MB)",
        deb.metadata().unwrap().len(),
        deb.metadata().unwrap().len() as f64 / 1e6
    );

    // Control: what it needs and which files are the operator's.
    let control = stdout_of(Command::new("dpkg-deb").arg("-f").arg(&deb));
    assert!(control.contains("Package: airlock\n"), "{control}");
    assert!(control.contains("Section: net\n"), "{control}");
    let depends = control
        .lines()
        .find_map(|l| l.strip_prefix("Depends: "))
        .unwrap_or_default();
    assert!(depends.contains("adduser"), "{control}");
    let dir = tempfile::tempdir().unwrap();
    let ctrl = dir.path().join("control");
    stdout_of(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&ctrl));
    assert_eq!(
        std::fs::read_to_string(ctrl.join("conffiles"))
            .unwrap()
            .trim(),
        "/etc/airlock/airlock.toml"
    );
    for script in ["postinst", "postrm", "prerm"] {
        let path = ctrl.join(script);
        stdout_of(Command::new("sh").arg("-n").arg(&path));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("#DEBHELPER#"),
            "{script}: the token was filled"
        );
    }
    let postinst = std::fs::read_to_string(ctrl.join("postinst")).unwrap();
    assert!(postinst.contains("adduser --system --group"), "{postinst}");
    assert!(postinst.contains("chmod 0700"), "{postinst}");
    assert!(
        postinst.contains("mv -n -T \"$empty\" \"$keys\""),
        "an empty enrollment file the service can read, renamed into place: {postinst}"
    );
    // Sums of every file but the conffile, for dpkg --verify and debsums.
    let sums = std::fs::read_to_string(ctrl.join("md5sums")).unwrap();
    assert!(sums.contains("  usr/bin/airlock\n"), "{sums}");
    assert!(!sums.contains("etc/airlock"), "{sums}");
    let postrm = std::fs::read_to_string(ctrl.join("postrm")).unwrap();
    assert!(postrm.contains("rm -rf /var/cache/airlock"), "{postrm}");

    // Contents: path → (mode, owner), all root's.
    let listing = stdout_of(Command::new("dpkg-deb").arg("-c").arg(&deb));
    let files: std::collections::BTreeMap<String, (String, String)> = listing
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[5].trim_start_matches("./").to_string(),
                (f[0].to_string(), f[1].to_string()),
            )
        })
        .collect();
    let want = [
        ("usr/bin/airlock", "-rwxr-xr-x"),
        ("usr/lib/systemd/system/airlock.service", "-rw-r--r--"),
        ("etc/airlock/airlock.toml", "-rw-r--r--"),
        ("usr/share/man/man1/airlock.1.gz", "-rw-r--r--"),
        ("usr/share/man/man1/airlock-serve.1.gz", "-rw-r--r--"),
        (
            "usr/share/man/man1/airlock-limits-report.1.gz",
            "-rw-r--r--",
        ),
        (
            "usr/share/bash-completion/completions/airlock",
            "-rw-r--r--",
        ),
        ("usr/share/zsh/vendor-completions/_airlock", "-rw-r--r--"),
        (
            "usr/share/fish/vendor_completions.d/airlock.fish",
            "-rw-r--r--",
        ),
        ("usr/share/doc/airlock/README.md", "-rw-r--r--"),
        ("usr/share/doc/airlock/CONFIGURATION.md", "-rw-r--r--"),
        ("usr/share/doc/airlock/copyright", "-rw-r--r--"),
        ("usr/share/doc/airlock/changelog.Debian.gz", "-rw-r--r--"),
        ("usr/share/lintian/overrides/airlock", "-rw-r--r--"),
    ];
    for (path, mode) in want {
        let (m, owner) = files
            .get(path)
            .unwrap_or_else(|| panic!("{path} not in the package:\n{listing}"));
        assert_eq!(m, mode, "{path}");
        assert!(root_s(owner), "{path}: {owner}");
    }
    assert!(
        files.values().all(|(_, owner)| root_s(owner)),
        "every file root's:\n{listing}"
    );
    // One page per subcommand, as `airlock man --dir` writes them.
    let pages = files
        .keys()
        .filter(|p| p.starts_with("usr/share/man/man1/") && p.ends_with(".1.gz"))
        .count();
    let made = tempfile::tempdir().unwrap();
    stdout_of(
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["man", "--dir"])
            .arg(made.path()),
    );
    assert_eq!(pages, std::fs::read_dir(made.path()).unwrap().count());

    // The files in it are the ones in the sources, and they work.
    let unpacked = dir.path().join("root");
    stdout_of(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked));
    assert_eq!(
        std::fs::read_to_string(unpacked.join("usr/lib/systemd/system/airlock.service")).unwrap(),
        std::fs::read_to_string(root.join("packaging/deb/airlock.service")).unwrap()
    );
    // The conffile names the service's directories for every command;
    // here they are a temporary directory's.
    let state = tempfile::tempdir().unwrap();
    let conffile = std::fs::read_to_string(unpacked.join("etc/airlock/airlock.toml")).unwrap();
    assert!(
        conffile.contains("state_dir = \"/var/lib/airlock\"\n"),
        "{conffile}"
    );
    assert!(
        conffile.contains("cache_dir = \"/var/cache/airlock\"\n"),
        "{conffile}"
    );
    let config = state.path().join("airlock.toml");
    std::fs::write(
        &config,
        conffile
            .replace(
                "/var/lib/airlock",
                &state.path().join("lib").display().to_string(),
            )
            .replace(
                "/var/cache/airlock",
                &state.path().join("cache").display().to_string(),
            ),
    )
    .unwrap();
    let script = state.path().join("nodes.js");
    std::fs::write(&script, "(await tools.node_list()).length > 0").unwrap();
    let out = stdout_of(
        Command::new(unpacked.join("usr/bin/airlock"))
            .arg("--config")
            .arg(&config)
            .arg("exec")
            .arg(&script),
    );
    assert_eq!(
        out.trim(),
        "true",
        "the commented conffile runs the simulated cluster"
    );
    let version_line = stdout_of(Command::new(unpacked.join("usr/bin/airlock")).arg("--version"));
    assert!(version_line.contains(version), "{version_line}");
}
