//! `airlock runbook`: add a runbook file, list and show the versions,
//! diff a file against the current version, approve a version (never
//! one's own), retire a runbook. Each step is an audit line.

use std::{path::PathBuf, process::ExitCode};

use airlock_catalog::visible::visible;
use airlock_gateway::state::State;
use airlock_runbooks::runbook::{short, version_of, Runbook, RunbookStore, StoreError, Stored};
use clap::Subcommand;
use serde_json::{Map, Value};

use crate::{
    admin::{now_ms, state},
    approvers::Known,
    settings::ConfigFile,
};

#[derive(Subcommand)]
pub enum RunbookAction {
    /// Check a runbook file and keep it as the runbook's current version
    /// (unapproved, unless these exact bytes were approved before).
    Add {
        file: PathBuf,
        /// Who wrote it: this person cannot approve it (four eyes).
        /// Default: the login name ($SUDO_USER under sudo, else $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Each runbook's current version: its status, author and approver.
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A runbook's versions, newest first, and its current file whole.
    Show {
        name: String,
        /// Show this version's file instead (8 or more hex digits).
        #[arg(long)]
        version: Option<String>,
    },
    /// What a file changes against the runbook's current version (or
    /// between two versions), as a unified diff.
    Diff {
        name: String,
        /// A runbook file, or a version (8+ hex digits); default: the
        /// version before the current one.
        against: Option<String>,
    },
    /// Let a version make its changes without asking per call. The
    /// person who added it cannot.
    Approve {
        name: String,
        /// The whole version (64 hex digits, as `add` and `sha256sum
        /// FILE` print it).
        version: String,
        /// Who approves (recorded, and written to the audit).
        /// Default: the login name ($SUDO_USER under sudo, else $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Stop every version of a runbook from running (adding one again
    /// brings it back).
    Retire {
        name: String,
        /// Who retires it (written to the audit).
        /// Default: the login name ($SUDO_USER under sudo, else $USER).
        #[arg(long)]
        by: Option<String>,
    },
}

/// Every version of `name`, the current one first; an error if none.
fn versions(store: &dyn RunbookStore, name: &str) -> Result<Vec<Stored>, String> {
    let versions = store.versions(name).map_err(|e| e.to_string())?;
    if versions.is_empty() {
        return Err(StoreError::UnknownName(visible(name).to_string()).to_string());
    }
    Ok(versions)
}

fn audited(state: &State, event: &str, s: &Stored, by: &str) -> Result<(), String> {
    let mut line = Map::new();
    line.insert("runbook".into(), Value::String(s.name.clone()));
    line.insert("runbook_version".into(), Value::String(s.version.clone()));
    line.insert(
        "by".into(),
        Value::String(airlock_catalog::visible::quote(by, 256)),
    );
    if event == "runbook_approved" {
        // Who wrote it, beside who approved it: `audit verify` holds the
        // two apart from this line alone (`audit_people`).
        line.insert(
            "author".into(),
            Value::String(airlock_catalog::visible::quote(&s.author, 256)),
        );
    }
    state
        .audit
        .append(event, line)
        .map(|_| ())
        .map_err(|e| format!("done, but the audit line could not be written: {e}"))
}

fn when(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Reads a runbook file, refusing what is not one with the field and rule.
fn read(path: &PathBuf) -> Result<(String, Runbook), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > airlock_runbooks::runbook::MAX_RUNBOOK_BYTES as u64 {
        return Err(format!(
            "{}: {} bytes; a runbook file is at most {} bytes",
            path.display(),
            meta.len(),
            airlock_runbooks::runbook::MAX_RUNBOOK_BYTES
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let runbook = Runbook::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((text, runbook))
}

/// Whether a runbook's script runs as written: a runbook runs exactly as
/// its approver reads it (`Sandbox::execute_within`), so what an agent's
/// own script may be (TypeScript, inside a Markdown fence, `export
/// default` of a function) is refused here, before anyone approves it.
async fn runs_as_written(file: &ConfigFile, runbook: &Runbook) -> Result<(), String> {
    use airlock_sandbox::ExecError;
    let (config, _) = crate::settings::SandboxFlags::default()
        .resolve(file)
        .map_err(|e| e.to_string())?;
    let sandbox = airlock_sandbox::Sandbox::new(config)
        .await
        .map_err(|e| format!("cannot start the sandbox to check the script: {e}"))?;
    match sandbox.check_as_written(&runbook.source).await {
        Ok(()) => Ok(()),
        Err(ExecError::SyntaxError {
            message,
            line,
            column,
        }) => Err(format!(
            "script.source does not parse as JavaScript at line {line}, column {column} of the script: {message}. A runbook runs exactly as its approver reads it, so nothing in it is rewritten as in an agent's own script: write it as plain JavaScript, without TypeScript types, a Markdown fence or `export default` (its value is that of its last expression, or what it returns)"
        )),
        Err(e) => Err(format!("the script could not be checked: {e}")),
    }
}

pub async fn runbook(file: &ConfigFile, action: RunbookAction) -> ExitCode {
    let state = match state(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let known = match crate::approvers::Known::of(file, state.keys.as_deref()) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match act(file, &state, &known, action).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn act(
    config: &ConfigFile,
    state: &State,
    known: &Known,
    action: RunbookAction,
) -> Result<(), String> {
    let store = &state.runbooks;
    match action {
        RunbookAction::Add { file, by } => {
            // The bytes checked are the bytes kept: read once.
            let (text, runbook) = read(&file)?;
            runs_as_written(config, &runbook)
                .await
                .map_err(|e| format!("{}: {e}", file.display()))?;
            let by = known.decider(by.as_deref())?;
            let (s, new) = store
                .add(&runbook.name, &text, &by, now_ms())
                .map_err(|e| e.to_string())?;
            audited(state, "runbook_added", &s, &by)?;
            let status = match (new, &s.approved_by) {
                (_, Some(a)) => format!("approved by {} (these bytes were approved before)", visible(a)),
                (_, None) => format!(
                    "unapproved: its changes are refused until another operator runs `airlock runbook approve {} {}`",
                    s.name,
                    s.version
                ),
            };
            println!(
                "{} {} version {} (sha256 {}): current, {status}",
                if new { "added" } else { "re-added" },
                s.name,
                short(&s.version),
                s.version
            );
            Ok(())
        }
        RunbookAction::List { json } => {
            let current = store.current().map_err(|e| e.to_string())?;
            if json {
                let rows: Vec<Value> = current
                    .iter()
                    .map(|s| {
                        let description = Runbook::parse(&s.text)
                            .map(|r| r.description)
                            .unwrap_or_default();
                        serde_json::json!({
                            "name": s.name,
                            "version": s.version,
                            "status": s.status(),
                            "description": description,
                            "author": s.author,
                            "approved_by": s.approved_by,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).unwrap_or_default()
                );
                return Ok(());
            }
            if current.is_empty() {
                println!("no runbooks: `airlock runbook add FILE` adds one (examples/runbooks/ has three)");
            }
            for s in current {
                println!(
                    "{:<24} {}  {:<10} added by {}{}",
                    s.name,
                    short(&s.version),
                    s.status(),
                    visible(&s.author),
                    s.approved_by
                        .as_deref()
                        .map(|a| format!(", approved by {}", visible(a)))
                        .unwrap_or_default()
                );
            }
            Ok(())
        }
        RunbookAction::Show { name, version } => {
            let versions = versions(&**store, &name)?;
            let first = &versions[0];
            for (i, s) in versions.iter().enumerate() {
                println!(
                    "{} {}  {:<10} added {} by {}{}",
                    if i == 0 { "*" } else { " " },
                    short(&s.version),
                    s.status(),
                    when(s.added_ms),
                    visible(&s.author),
                    match (&s.approved_by, s.approved_ms) {
                        (Some(a), Some(t)) => format!(", approved {} by {}", when(t), visible(a)),
                        _ => String::new(),
                    }
                );
            }
            let shown = match version {
                Some(v) => airlock_runbooks::runbook::pick(&name, &versions, &v)
                    .map_err(|e| e.to_string())?,
                None => first,
            };
            println!(
                "\n--- version {} (sha256 {})",
                short(&shown.version),
                shown.version
            );
            print!("{}", visible_file(&shown.text));
            Ok(())
        }
        RunbookAction::Diff { name, against } => {
            let versions = versions(&**store, &name)?;
            let current = &versions[0];
            let (label, other) = match against {
                Some(a) if std::path::Path::new(&a).exists() => {
                    let (text, _) = read(&PathBuf::from(&a))?;
                    (a, text)
                }
                Some(v) => {
                    let s = airlock_runbooks::runbook::pick(&name, &versions, &v)
                        .map_err(|e| e.to_string())?;
                    (format!("version {}", short(&s.version)), s.text.clone())
                }
                None => match versions.get(1) {
                    Some(s) => (format!("version {}", short(&s.version)), s.text.clone()),
                    None => {
                        return Err(format!(
                        "runbook {name} has one version: give a file or a version to diff against"
                    ))
                    }
                },
            };
            let (old, new) = if label.starts_with("version ") {
                (other.as_str(), current.text.as_str())
            } else {
                (current.text.as_str(), other.as_str())
            };
            let (old_label, new_label) = if label.starts_with("version ") {
                (
                    label.clone(),
                    format!("version {} (current)", short(&current.version)),
                )
            } else {
                (
                    format!("version {} (current)", short(&current.version)),
                    format!("{label} (version {})", short(&version_of(new))),
                )
            };
            let diff = similar::TextDiff::from_lines(old, new);
            let text = diff
                .unified_diff()
                .context_radius(3)
                .header(&old_label, &new_label)
                .to_string();
            if text.is_empty() {
                println!("no difference: the same bytes, the same version");
            } else {
                print!("{}", visible_file(&text));
            }
            Ok(())
        }
        RunbookAction::Approve { name, version, by } => {
            let by = known.decider(by.as_deref())?;
            let s = store
                .approve(&name, &version, &by, now_ms())
                .map_err(|e| e.to_string())?;
            audited(state, "runbook_approved", &s, &by)?;
            println!(
                "approved {} version {}: runs of it by identities its file allows make its changes inside its bounds without asking",
                s.name,
                short(&s.version)
            );
            if store
                .current()
                .map_err(|e| e.to_string())?
                .iter()
                .all(|c| c.version != s.version)
            {
                println!("note: it is not the current version of {}; `airlock runbook add` its file to make it so", s.name);
            }
            Ok(())
        }
        RunbookAction::Retire { name, by } => {
            let by = known.decider(by.as_deref())?;
            let n = store.retire(&name, now_ms()).map_err(|e| e.to_string())?;
            let versions = store.versions(&name).map_err(|e| e.to_string())?;
            if let Some(s) = versions.first() {
                audited(state, "runbook_retired", s, &by)?;
            }
            println!("retired {name}: {n} version(s) stopped; scripts calling runbooks.{name} are told it does not exist");
            Ok(())
        }
    }
}

/// A file for a terminal: its lines as written, control characters other
/// than newline and tab escaped so a stored file cannot act on the
/// terminal.
fn visible_file(text: &str) -> String {
    text.chars()
        .flat_map(|c| -> Box<dyn Iterator<Item = char>> {
            if c == '\n' || c == '\t' || !c.is_control() {
                Box::new(std::iter::once(c))
            } else {
                Box::new(c.escape_default())
            }
        })
        .collect()
}
