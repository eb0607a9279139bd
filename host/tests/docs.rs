//! The docs test: what README.md and docs/*.md show is what the binary
//! does, so the two cannot drift apart unnoticed.
//!
//! - Every ` ```sh runnable ` block is run, the blocks of one file in order
//!   and in one scratch directory (a later block may use what an earlier
//!   one started), against the simulated cluster. `airlock` and
//!   `target/release/airlock` are the binary under test; `examples/` is the
//!   repository's. Each line is one command (a trailing `\` joins lines);
//!   it must succeed, unless the comment under it says `#   error: TEXT`,
//!   when it must fail saying TEXT. A comment `#   TEXT` under a command is
//!   output it must print. `…` in TEXT stands for anything; spacing is not
//!   compared. A command ending in `&` runs in the background, is ready
//!   once it prints its first line, and is stopped when the file is done.
//! - Every ` ```js ` block runs as a script against the simulator and
//!   ends with a value, every ` ```toml ` block is read as a configuration
//!   file, and every ` ```json ` block parses.
//!
//! A block that cannot run here (it needs PostgreSQL, a real cluster, an
//! MCP client or `sudo`) is simply not marked runnable.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// Longest one documented command may take; the README's take seconds.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);
/// Longest a background command may take to print its first line.
const READY_LIMIT: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Markdown files the docs test reads.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A fenced block: where it starts, its info string, its text.
struct Block {
    at: String,
    info: String,
    text: String,
}

fn blocks(path: &Path) -> Vec<Block> {
    let source = std::fs::read_to_string(path).unwrap();
    let name = path
        .strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in source.lines().enumerate() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => out.push(block),
            (Some(info), None) => {
                open = Some(Block {
                    at: format!("{name}:{}", i + 1),
                    info: info.trim().to_string(),
                    text: String::new(),
                })
            }
            (None, Some(mut block)) => {
                block.text.push_str(line);
                block.text.push('\n');
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "{name}: a fenced block is never closed");
    out
}

/// One command of a runnable block and what its comment says it does.
#[derive(Debug)]
struct Step {
    line: String,
    expect: Expect,
}

#[derive(Debug)]
enum Expect {
    Succeeds,
    Prints(String),
    FailsSaying(String),
}

fn steps(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim_end();
        if let Some(said) = line.strip_prefix("#   ") {
            let step = steps
                .last_mut()
                .expect("an expected-output comment follows a command");
            step.expect = match said.strip_prefix("error: ") {
                Some(_) => Expect::FailsSaying(said.to_string()),
                None => Expect::Prints(said.to_string()),
            };
            continue;
        }
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(line);
                steps.push(Step {
                    line: std::mem::take(&mut pending),
                    expect: Expect::Succeeds,
                });
            }
        }
    }
    steps
}

/// Whether `output` says `expected`: its pieces between `…` appear in
/// order, whitespace ignored.
fn says(output: &str, expected: &str) -> bool {
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let output = squeeze(output);
    let mut from = 0;
    for piece in expected.split('…').map(squeeze).filter(|p| !p.is_empty()) {
        match output[from..].find(&piece) {
            Some(at) => from += at + piece.len(),
            None => return false,
        }
    }
    true
}

/// A shell command line without its trailing comment (a `#` after a
/// space, outside quotes; documented commands keep it that simple).
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    let bytes = line.as_bytes();
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if i > 0 && bytes[i - 1] == b' ' => return line[..i].trim_end(),
            _ => {}
        }
    }
    line.trim_end()
}

/// One Markdown file's scratch directory and its background commands,
/// which are stopped on every way out of the test.
struct Session {
    dir: tempfile::TempDir,
    background: Vec<Child>,
}

impl Drop for Session {
    fn drop(&mut self) {
        for child in &mut self.background {
            kill_group(child.id());
            let _ = child.wait();
        }
    }
}

/// Kills a command and whatever it started (each command leads a process
/// group of its own: a pipeline or `$(…)` leaves no child behind).
fn kill_group(leader: u32) {
    // SAFETY: kill(2) with a negative pid signals that process group; no
    // memory is involved.
    unsafe { libc::kill(-(leader as i32), libc::SIGKILL) };
}

impl Session {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = env!("CARGO_BIN_EXE_airlock");
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("target/release")).unwrap();
        std::os::unix::fs::symlink(bin, dir.path().join("bin/airlock")).unwrap();
        std::os::unix::fs::symlink(bin, dir.path().join("target/release/airlock")).unwrap();
        std::os::unix::fs::symlink(repo().join("examples"), dir.path().join("examples")).unwrap();
        Self {
            dir,
            background: Vec::new(),
        }
    }

    fn command(&self, line: &str) -> Command {
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut cmd = Command::new("sh");
        // Nothing of the developer's environment (a real deployment's
        // AIRLOCK_STATE_URL or AIRLOCK_AUDIT_FILE, say) reaches the
        // documented commands; only the compiled guest's cache is shared,
        // so no test compiles it again.
        cmd.env_clear();
        if let Some(cache) = airlock_sandbox::default_cache_dir() {
            cmd.env("AIRLOCK_CACHE_DIR", cache);
        }
        cmd.arg("-c")
            .arg(line)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("HOME", home)
            .env("AIRLOCK_STATE_DIR", self.dir.path().join("state"))
            // The documented port is the simulator's default; the test
            // takes a free one, as `--port 0` would.
            .env("AIRLOCK_SIM_PORT", "0")
            .env("TMPDIR", self.dir.path())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Starts `line` in the background and waits for its first line.
    fn start(&mut self, at: &str, line: &str) {
        let mut child = self.command(&format!("exec {line}")).spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(out).lines();
                if let Some(Ok(first)) = lines.next() {
                    let _ = tx.send(first);
                }
                // Keep reading so the command never blocks on a full pipe.
                for _ in lines {}
            });
        }
        self.background.push(child);
        let first = rx.recv_timeout(READY_LIMIT);
        assert!(
            first.is_ok(),
            "{at}: `{line}` printed nothing within {READY_LIMIT:?}"
        );
    }

    fn run(&mut self, at: &str, step: &Step) {
        let line = without_comment(&step.line);
        if let Some(line) = line.strip_suffix('&') {
            return self.start(at, line.trim_end());
        }
        let child = self.command(line).spawn().unwrap();
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(COMMAND_LIMIT) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                kill_group(pid);
                panic!("{at}: `{line}` took more than {COMMAND_LIMIT:?}");
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let all = format!("{stdout}{stderr}");
        let shown = format!("{at}: `{line}` exited {:?}\n{all}", out.status.code());
        match &step.expect {
            Expect::Succeeds => assert!(out.status.success(), "{shown}"),
            Expect::Prints(text) => {
                assert!(out.status.success(), "{shown}");
                assert!(says(&all, text), "{shown}\nexpected it to print: {text}");
            }
            Expect::FailsSaying(text) => {
                assert!(!out.status.success(), "{shown}\nexpected it to fail");
                assert!(says(&all, text), "{shown}\nexpected it to say: {text}");
            }
        }
    }
}

#[test]
fn every_runnable_shell_block_does_what_the_docs_say() {
    let mut ran = 0;
    for file in documents() {
        let runnable: Vec<Block> = blocks(&file)
            .into_iter()
            .filter(|b| b.info == "sh runnable")
            .collect();
        if runnable.is_empty() {
            continue;
        }
        let mut session = Session::new();
        for block in &runnable {
            for step in steps(&block.text) {
                session.run(&block.at, &step);
                ran += 1;
            }
        }
    }
    assert!(
        ran >= 5,
        "only {ran} documented commands are marked runnable"
    );
}

#[test]
fn every_toml_block_is_a_configuration_airlock_reads() {
    let mut read = 0;
    for file in documents() {
        for block in blocks(&file).into_iter().filter(|b| b.info == "toml") {
            let config: airlock::settings::ConfigFile = toml::from_str(&block.text)
                .unwrap_or_else(|e| panic!("{}: not a configuration Airlock reads: {e}", block.at));
            config
                .approval
                .check()
                .and_then(|()| config.rate.check())
                .unwrap_or_else(|e| panic!("{}: {e}", block.at));
            read += 1;
        }
    }
    assert!(read >= 5, "{read} TOML blocks");
}

#[test]
fn every_js_block_runs_against_the_simulator() {
    let session = Session::new();
    let mut ran = 0;
    for file in documents() {
        for block in blocks(&file).into_iter().filter(|b| b.info == "js") {
            let mut cmd = session.command("airlock exec --json -");
            cmd.stdin(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), block.text.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            let outcome: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{}: no outcome ({e}): {out:?}", block.at));
            assert!(
                outcome["result"].get("ok").is_some(),
                "{}: the script fails: {outcome}",
                block.at
            );
            ran += 1;
        }
    }
    assert!(ran >= 1, "{ran} JavaScript blocks");
}

#[test]
fn every_json_block_parses() {
    for file in documents() {
        for block in blocks(&file).into_iter().filter(|b| b.info == "json") {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&block.text) {
                panic!("{}: {e}", block.at);
            }
        }
    }
}

#[test]
fn the_harness_reads_commands_and_expectations_as_documented() {
    let s = steps("a --x \\\n  --y   # joined\n#   error: Bad … here\n# plain comment\nb &\nc\n#   ok: … done\n");
    assert_eq!(s.len(), 3, "{s:?}");
    assert_eq!(without_comment(&s[0].line), "a --x    --y");
    assert!(matches!(&s[0].expect, Expect::FailsSaying(t) if t == "error: Bad … here"));
    assert!(matches!(s[1].expect, Expect::Succeeds));
    assert!(says("ok:  7 lines\n done", "ok: … done"));
    assert!(!says("done ok:", "ok: … done"), "in order");
    assert!(
        says("[\n  {\"a\": 1}\n]", "[{\"a\": 1} …"),
        "spacing ignored"
    );
    assert_eq!(without_comment("echo '# not' # yes"), "echo '# not'");
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// docs/ARCHITECTURE.md is the newcomer's map: a workspace crate, or a
/// table the state stores create, added without a place on it fails here.
#[test]
fn the_architecture_map_names_every_crate_and_every_state_table() {
    let map = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let members: Vec<&str> = manifest["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(members.len() >= 12, "{members:?}");
    let mut missing: Vec<String> = members
        .iter()
        .filter(|m| !map.contains(&format!("`{m}/`")))
        .map(|m| format!("crate `{m}/`"))
        .collect();
    let mut files = Vec::new();
    rust_files(&repo().join("tools/state/src"), &mut files);
    let mut tables = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for after in text.split("CREATE TABLE ").skip(1) {
            let after = after.trim_start_matches("IF NOT EXISTS ");
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                tables.insert(name);
            }
        }
    }
    assert!(tables.len() >= 14, "{tables:?}");
    missing.extend(
        tables
            .iter()
            .filter(|t| !map.contains(&format!("`{t}`")))
            .map(|t| format!("table `{t}`")),
    );
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name: {}",
        missing.join(", ")
    );
}
