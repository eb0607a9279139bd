//! The Debian package installed the way an operator installs it, into a
//! clean Debian root (`packaging/deb/debian-root.sh`: debootstrap's
//! minimal bookworm with adduser, procps, systemd and man-db, made once
//! and cached as a tarball in target/debian-root): `apt-get install
//! ./airlock_….deb`, then the files, modes, owners and user it made, the
//! guest compiled at install, `airlock --version`, `man airlock`, `airlock
//! demo`, `airlock exec` against `airlock sim`, the unit checked by the
//! root's own systemd, the service started as its unit starts it and used
//! by an MCP client, an upgrade over an edited conffile and live state
//! (kept, the audit chain verified), remove, and purge, after which the
//! root is as it was before the install.
//!
//! Needs root (debootstrap, chroot) and Debian's tools; SKIPPED, said,
//! without them. Each command runs in namespaces of its own (`unshare`):
//! its /proc and /dev/pts mounts, and any process it leaves, end with it.

mod common;

use std::{
    collections::BTreeMap,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Instant,
};

use common::{call, repo, stdout_of, succeeded, text, Server};

const PATH: &str = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";

/// A Debian root unpacked from the cached tarball into a temporary
/// directory, removed when dropped.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new(tarball: &Path) -> Root {
        let target = repo().join("target/debian-root");
        let dir = tempfile::Builder::new()
            .prefix("root.")
            .tempdir_in(&target)
            .unwrap();
        stdout_of(
            Command::new("tar")
                .args(["--numeric-owner", "-xpf"])
                .arg(tarball)
                .arg("-C")
                .arg(dir.path()),
        );
        Root { dir }
    }

    fn path(&self, inside: &str) -> PathBuf {
        self.dir.path().join(inside.trim_start_matches('/'))
    }

    /// Runs `script` with /bin/sh inside the root as root, in a fresh
    /// environment, with a /proc and a /dev/pts of its own; every process
    /// it starts ends with it (a PID namespace).
    fn sh(&self, script: &str) -> Output {
        let root = self.dir.path().display().to_string();
        let inner = format!(
            "mount -t devpts -o newinstance,ptmxmode=0666 devpts {root}/dev/pts && \
             exec chroot {root} /usr/bin/env -i {PATH} HOME=/root LANG=C.UTF-8 \
             DEBIAN_FRONTEND=noninteractive /bin/sh -c \"$0\""
        );
        Command::new("unshare")
            .arg(format!("--mount-proc={root}/proc"))
            .args([
                "--pid",
                "--fork",
                "--kill-child",
                "sh",
                "-c",
                &inner,
                script,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// [`Root::sh`], which must succeed; its standard output.
    fn ok(&self, script: &str) -> String {
        succeeded(&format!("in the root: {script}\n"), self.sh(script))
    }

    /// (mode, uid, gid) of a path inside, not following a last symlink.
    fn owner(&self, inside: &str) -> (u32, u32, u32) {
        let m = std::fs::symlink_metadata(self.path(inside))
            .unwrap_or_else(|e| panic!("{inside}: {e}"));
        (m.mode() & 0o7777, m.uid(), m.gid())
    }

    /// Every path but the bookkeeping of apt, dpkg, man-db and the logs,
    /// and the operator's own home, with its mode and owners; the account
    /// files with their contents.
    fn files(&self) -> BTreeMap<String, String> {
        const NOT: [&str; 11] = [
            "proc",
            "dev/pts",
            "tmp",
            "root",
            "var/lib/dpkg",
            "var/lib/apt",
            "var/cache/apt",
            "var/cache/debconf",
            "var/cache/man",
            "var/log",
            "run",
        ];
        let mut found = BTreeMap::new();
        let mut todo = vec![self.dir.path().to_path_buf()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path
                    .strip_prefix(self.dir.path())
                    .unwrap()
                    .display()
                    .to_string();
                if NOT.contains(&rel.as_str()) || rel.ends_with('-') && rel.starts_with("etc/") {
                    // Skipped, and adduser's backups (/etc/passwd- ...).
                    continue;
                }
                let m = std::fs::symlink_metadata(&path).unwrap();
                let mut what = format!("{:o} {}:{}", m.mode(), m.uid(), m.gid());
                if ["etc/passwd", "etc/group", "etc/shadow", "etc/gshadow"].contains(&rel.as_str())
                {
                    what.push('\n');
                    what.push_str(&std::fs::read_to_string(&path).unwrap());
                }
                if m.is_dir() {
                    todo.push(path);
                }
                found.insert(rel, what);
            }
        }
        found
    }

    /// The uid and gid of a user in the root's account files.
    fn user(&self, name: &str) -> Option<(u32, u32, String)> {
        let passwd = std::fs::read_to_string(self.path("etc/passwd")).unwrap();
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == name).then(|| {
                (
                    f[2].parse().unwrap(),
                    f[3].parse().unwrap(),
                    format!("{} {}", f[5], f[6]),
                )
            })
        })
    }
}

/// `packaging/deb/build.sh` with extra arguments; the package, copied
/// into `keep` (cargo-deb removes the other versions it finds beside it).
fn build(extra: &[&str], keep: &Path) -> PathBuf {
    let said = stdout_of(
        Command::new("sh")
            .arg(repo().join("packaging/deb/build.sh"))
            .args(extra)
            .env("AIRLOCK_PREBUILT", "1"),
    );
    let built = PathBuf::from(said.lines().last().unwrap().trim());
    let kept = keep.join(built.file_name().unwrap());
    std::fs::copy(&built, &kept).unwrap();
    kept
}

/// What is missing to run the install test, if anything.
fn missing() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (debootstrap and chroot need it; CI runs as root)");
    }
    for tool in ["dpkg-deb", "apt-get", "unshare", "chroot"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some("no Debian tools (dpkg-deb, apt-get, unshare, chroot)");
        }
    }
    None
}

/// Lintian, installed with apt-get if missing: no error or warning but
/// those `packaging/deb/lintian-overrides` explains.
fn lintian(deb: &Path) {
    let have = Command::new("lintian").arg("--version").output().is_ok();
    if !have {
        let install = || {
            Command::new("apt-get")
                .args(["install", "-y", "-q", "lintian"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .output()
                .unwrap()
        };
        let mut out = install();
        if !out.status.success() {
            // A fresh machine's package lists may be missing or stale.
            stdout_of(Command::new("apt-get").args(["update", "-q"]));
            out = install();
        }
        assert!(out.status.success(), "apt-get install lintian: {out:?}");
    }
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "-E", "--pedantic"])
        .arg(deb)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "lintian: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let remarks: Vec<&str> = said.lines().filter(|l| !l.starts_with("N:")).collect();
    eprintln!(
        "lintian: {} remark(s) past the overrides: {remarks:?}",
        remarks.len()
    );
    assert!(
        remarks
            .iter()
            .all(|l| l.starts_with("I:") || l.starts_with("P:")),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_installs_runs_upgrades_removes_and_purges_the_package() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let version = env!("CARGO_PKG_VERSION");
    let debs = tempfile::tempdir().unwrap();
    let first = build(&[], debs.path());
    let second = build(&["--deb-revision", "2"], debs.path());
    assert!(first.ends_with(format!("airlock_{version}-1_amd64.deb")));
    assert!(second.ends_with(format!("airlock_{version}-2_amd64.deb")));
    lintian(&first);
    let size = first.metadata().unwrap().len();

    let made = Instant::now();
    let tarball = stdout_of(Command::new("sh").arg(repo().join("packaging/deb/debian-root.sh")));
    let root = Root::new(Path::new(tarball.lines().last().unwrap().trim()));
    eprintln!("clean root ready in {:.1} s", made.elapsed().as_secs_f64());
    for deb in [&first, &second] {
        std::fs::copy(deb, root.path("tmp").join(deb.file_name().unwrap())).unwrap();
    }
    let before = root.files();
    assert!(before.len() > 5000, "{} paths", before.len());
    assert!(root.user("airlock").is_none());

    // Install, as the operator does: apt, with a path.
    let started = Instant::now();
    let said = root.ok(&format!(
        "apt-get install -y /tmp/airlock_{version}-1_amd64.deb"
    ));
    let install_s = started.elapsed().as_secs_f64();
    assert!(
        said.contains("airlock: compiled the sandbox guest into /var/cache/airlock"),
        "{said}"
    );
    eprintln!(
        "package {size} bytes ({:.1} MB); installed in {install_s:.1} s, the guest's compilation included",
        size as f64 / 1e6
    );
    assert_eq!(
        root.ok("dpkg-query -W -f '${Status} ${Version}' airlock"),
        format!("install ok installed {version}-1")
    );
    // Every packaged file as shipped (md5sums), the conffile untouched.
    assert_eq!(root.ok("dpkg --verify airlock"), "");

    // The user, the directories and the files, with their owners.
    let (uid, gid, home_shell) = root.user("airlock").expect("the airlock user");
    assert!(uid < 1000, "a system user: uid {uid}");
    assert_eq!(home_shell, "/var/lib/airlock /usr/sbin/nologin");
    for (path, want) in [
        ("usr/bin/airlock", (0o755, 0, 0)),
        ("usr/lib/systemd/system/airlock.service", (0o644, 0, 0)),
        ("etc/airlock", (0o750, 0, gid)),
        ("etc/airlock/airlock.toml", (0o644, 0, 0)),
        ("var/lib/airlock", (0o700, uid, gid)),
        ("var/lib/airlock/clients.toml", (0o600, uid, gid)),
        ("var/cache/airlock", (0o700, uid, gid)),
    ] {
        assert_eq!(root.owner(path), want, "{path}: (mode, uid, gid)");
    }
    // The guest was compiled at install, as the service's user.
    let compiled: Vec<String> = std::fs::read_dir(root.path("var/cache/airlock"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    assert_eq!(compiled.len(), 1, "{compiled:?}");
    let module = format!("var/cache/airlock/{}", compiled[0]);
    assert_eq!(root.owner(&module), (0o600, uid, gid));

    // What an operator types first.
    assert_eq!(
        root.ok("airlock --version").trim(),
        format!("airlock {version}")
    );
    assert_eq!(
        root.ok("man -w airlock airlock-limits-report"),
        "/usr/share/man/man1/airlock.1.gz\n/usr/share/man/man1/airlock-limits-report.1.gz\n"
    );
    let demo = root.ok("cd /root && airlock demo");
    assert!(demo.contains("\"running\""), "{demo}");

    // The unit, as the root's own systemd reads it.
    root.ok("systemd-analyze verify airlock.service");
    let security = root.ok("systemd-analyze security --offline=true airlock.service");
    let score = security
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("{security}"))
        .to_string();
    eprintln!("{score}");
    assert!(score.contains(" OK "), "{score}");

    // `airlock exec` over HTTPS against `airlock sim`, and the same script
    // as the service's user with the conffile (the simulated cluster
    // in-process): the same nodes.
    std::fs::write(
        root.path("tmp/nodes.js"),
        "(await tools.node_list({})).map((n) => n.node).sort().join(\",\")",
    )
    .unwrap();
    let via_sim = root.ok(
        "cd /root && (airlock sim --port 0 --dir /root/sim >/root/sim.out 2>&1 & \
         echo $! >/root/sim.pid) && \
         n=0; until grep -q '^configuration:' /root/sim.out; do \
           n=$((n+1)); [ $n -lt 600 ] || { cat /root/sim.out; exit 1; }; sleep 0.1; done && \
         airlock --config /root/sim/airlock.toml exec --identity alice /tmp/nodes.js; \
         rc=$?; kill -INT $(cat /root/sim.pid); exit $rc",
    );
    let nodes = via_sim.trim();
    assert!(nodes.split(',').count() >= 2, "{via_sim}");
    let as_service = root.ok("runuser -u airlock -- airlock exec /tmp/nodes.js");
    assert_eq!(as_service.trim(), nodes);
    // Root, with the service's conffile, is told whose state it is.
    let out = root.sh("airlock exec /tmp/nodes.js");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "root ran in the service's state");
    assert!(err.contains("sudo -u airlock airlock"), "{err}");
    assert_eq!(
        root.owner("var/lib/airlock/simulated").1,
        uid,
        "nothing of root's"
    );

    // The service, as its unit starts it: the unit's user, environment
    // and command (on a free port instead of 8787).
    let key = root
        .ok("runuser -u airlock -- airlock enroll agent")
        .trim()
        .to_string();
    assert!(key.starts_with("alk_"), "{key}");
    let unit =
        std::fs::read_to_string(root.path("usr/lib/systemd/system/airlock.service")).unwrap();
    let setting = |k: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(setting("User"), ["airlock"]);
    let exec_start = setting("ExecStart")[0].replace("127.0.0.1:8787", "127.0.0.1:0");
    let stop_within: u64 = setting("TimeoutStopSec")[0].parse().unwrap();
    let served = {
        let rootdir = root.dir.path().display().to_string();
        let mut cmd = Command::new("unshare");
        cmd.arg(format!("--mount-proc={rootdir}/proc"))
            .args([
                "chroot",
                &rootdir,
                "setpriv",
                "--reuid=airlock",
                "--regid=airlock",
            ])
            .args(["--init-groups", "--", "env", "-i", PATH])
            .args(setting("Environment"))
            .args(exec_start.split_whitespace())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let dir = tempfile::tempdir().unwrap();
        Server::adopt(
            cmd.spawn().unwrap(),
            root.path("var/lib/airlock/clients.toml"),
            dir,
        )
    };
    let client = served.connect(&key).await;
    let answer = call(
        &client,
        "execute",
        serde_json::json!({"script": std::fs::read_to_string(root.path("tmp/nodes.js")).unwrap()}),
    )
    .await;
    assert!(text(&answer).contains(nodes), "{}", text(&answer));
    client.cancel().await.unwrap();
    // Stop: SIGTERM, as systemd sends it; drained within TimeoutStopSec.
    let mut served = served;
    let stopping = Instant::now();
    // SAFETY: a signal to our own child, which has not been reaped.
    unsafe { libc::kill(served.child.id() as i32, libc::SIGTERM) };
    let status = served.child.wait().unwrap();
    let stop_s = stopping.elapsed().as_secs_f64();
    assert!(status.success(), "{status:?}");
    assert!(stop_s < stop_within as f64, "stopped in {stop_s:.1} s");
    eprintln!("the service stopped {stop_s:.2} s after SIGTERM (TimeoutStopSec={stop_within})");
    drop(served);

    // Upgrade over an edited conffile and live state.
    let conffile = root.path("etc/airlock/airlock.toml");
    let edited = format!(
        "{}\n# the operator's own: no node listing here\n[policy]\ndeny = [\"node_list\"]\n",
        std::fs::read_to_string(&conffile).unwrap()
    );
    std::fs::write(&conffile, &edited).unwrap();
    let audit = root.path("var/lib/airlock/simulated/audit.jsonl");
    let chain = std::fs::read_to_string(&audit).unwrap();
    assert!(chain.lines().count() >= 4, "{chain}");
    let clients = std::fs::read_to_string(root.path("var/lib/airlock/clients.toml")).unwrap();
    let upgrading = Instant::now();
    let said = root.ok(&format!(
        "apt-get install -y /tmp/airlock_{version}-2_amd64.deb </dev/null"
    ));
    eprintln!("upgraded in {:.1} s", upgrading.elapsed().as_secs_f64());
    // Compiled again (what is in the cache is the airlock user's, which
    // root does not load), and handed over.
    assert!(
        said.contains("airlock: compiled the sandbox guest into /var/cache/airlock"),
        "{said}"
    );
    assert_eq!(
        root.ok("dpkg-query -W -f '${Version}' airlock"),
        format!("{version}-2")
    );
    assert_eq!(std::fs::read_to_string(&conffile).unwrap(), edited);
    let after = std::fs::read_to_string(&audit).unwrap();
    assert!(after.starts_with(&chain), "the chain kept");
    assert_eq!(
        std::fs::read_to_string(root.path("var/lib/airlock/clients.toml")).unwrap(),
        clients
    );
    assert_eq!(root.user("airlock").unwrap().0, uid, "the same user");
    let verified = root.ok("runuser -u airlock -- airlock audit verify");
    assert!(verified.starts_with("ok: "), "{verified}");
    // The edited conffile is the one read.
    let out = root.sh("runuser -u airlock -- airlock exec /tmp/nodes.js");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PolicyDenied"), "{err}");

    // The airlock user (say, a script that escaped the sandbox) puts a
    // directory where root hands the module over: a reinstall goes on,
    // and leaves the compile to the service.
    root.ok(&format!(
        "runuser -u airlock -- sh -c 'rm {module} && mkdir {module}'",
        module = Path::new("/").join(&module).display()
    ));
    let said = root.ok(&format!(
        "apt-get install -y --reinstall /tmp/airlock_{version}-2_amd64.deb </dev/null 2>&1"
    ));
    assert!(said.contains("the service will when it starts"), "{said}");
    assert_eq!(
        root.ok("dpkg-query -W -f '${Status}' airlock"),
        "install ok installed"
    );
    assert!(
        std::fs::read_dir(root.path("var/cache"))
            .unwrap()
            .all(|e| !e.unwrap().file_name().to_string_lossy().contains("prepare")),
        "root's working directory removed"
    );
    std::fs::remove_dir(root.path(&module)).unwrap();

    // Remove keeps the operator's: the conffile, the state, the user.
    root.ok("apt-get remove -y airlock");
    assert!(!root.path("usr/bin/airlock").exists());
    assert_eq!(std::fs::read_to_string(&conffile).unwrap(), edited);
    assert!(audit.exists());
    assert!(root.user("airlock").is_some());

    // Purge leaves the root as it was before the install; a KEEP file
    // the airlock user made does not keep the state (one root makes does).
    root.ok("runuser -u airlock -- touch /var/lib/airlock/KEEP");
    root.ok("apt-get purge -y airlock");
    assert_eq!(
        root.ok("dpkg-query -W -f '${Status}' airlock 2>/dev/null || true"),
        ""
    );
    let left = root.files();
    let diff = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| -> Vec<String> {
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}: {v}"))
            .collect()
    };
    assert_eq!(diff(&left, &before), Vec::<String>::new(), "left behind");
    assert_eq!(
        diff(&before, &left),
        Vec::<String>::new(),
        "changed or gone"
    );
    eprintln!("after purge: {} paths as before the install", left.len());
}
