//! Operator commands: issuing keys, deciding approvals, verifying and
//! exporting the audit chain. They open the configured state themselves (the state
//! directory's files, or the deployment's PostgreSQL database), so they
//! run beside any number of servers.

use std::{os::unix::fs::OpenOptionsExt, path::PathBuf, process::ExitCode, sync::Arc};

use airlock_catalog::visible::visible;
use airlock_gateway::{
    approval::{ApprovalError, Request, Status},
    audit,
    decision::{self, Decider},
    keys::{self, KeyStore},
    state::State,
};
use airlock_runbooks::runbook::{Runbook, RunbookStore};
use airlock_state::local::EnrollmentFile;
use clap::Subcommand;

use crate::settings::ConfigFile;

#[derive(Subcommand)]
pub enum ApprovalAction {
    /// Requests waiting for a decision (and approvals not yet used).
    List {
        /// Include decided, used and expired requests.
        #[arg(long)]
        all: bool,
        /// Print them as JSON.
        #[arg(long, conflicts_with = "ids")]
        json: bool,
        /// Print only the ids of requests waiting for a decision, one per
        /// line: saved before the list is read, they are what `approvals
        /// approve` may then be given (a request filed meanwhile is not
        /// among them).
        #[arg(long)]
        ids: bool,
    },
    /// One request whole: every argument in full (a long value that lists
    /// summarise, such as cloud-init user data), who asked and decided.
    Show {
        /// The request's id (`ap-…`, or a plan's `pl-…`).
        id: String,
    },
    /// Allow the one call, or the one plan's changes, each request describes.
    Approve {
        /// Request ids (`ap-…`, or a plan's `pl-…`), one or more.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        /// Who decided (recorded with the request).
        /// Default: the login name ($SUDO_USER under sudo, else $USER).
        #[arg(long)]
        by: Option<String>,
        /// Why, in a sentence (at most 500 characters): kept with the
        /// decision, written to the audit, and told to the requester.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Refuse them.
    Deny {
        /// Request ids (`ap-…`, or a plan's `pl-…`), one or more.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        /// Who decided (recorded with the request).
        /// Default: the login name ($SUDO_USER under sudo, else $USER).
        #[arg(long)]
        by: Option<String>,
        /// Why, in a sentence (at most 500 characters): kept with the
        /// decision, written to the audit, and told to the requester.
        #[arg(long, default_value = "")]
        reason: String,
    },
}

#[derive(Subcommand)]
pub enum AuditAction {
    /// Check every line's hash and link; report the first broken line.
    Verify {
        /// A JSONL file to check offline (default: the configured audit
        /// chain, in its file or in PostgreSQL).
        file: Option<PathBuf>,
    },
    /// Write the configured audit chain as JSONL, which `audit verify
    /// FILE` checks offline.
    Export {
        /// Where to write it (created 0600; default: standard output).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// End, in the chain, the executions that started longer ago than
    /// --older-than and never ended (their process was killed): each gets
    /// an `execution_end` line with outcome `unknown`.
    Close {
        /// Leave executions younger than this alone: they may still be
        /// running on a live replica (default 1h; e.g. 30m, 2h).
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
        older_than: std::time::Duration,
    },
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The enrollment file named (`--file`, `AIRLOCK_ENROLLMENT`, else the
/// configuration's `enrollment`), else the state backend's keys
/// (PostgreSQL).
fn key_store(file: &ConfigFile, path: Option<PathBuf>) -> Result<Arc<dyn KeyStore>, String> {
    match path.or_else(|| file.enrollment.clone()) {
        Some(p) => Ok(Arc::new(EnrollmentFile::new(p))),
        None => match state(file)?.keys {
            Some(keys) => Ok(keys),
            None => Err("name the enrollment file (--file FILE, AIRLOCK_ENROLLMENT, or enrollment = \"FILE\" in the configuration), or keep keys in the deployment's database with [state] backend = \"postgres\"".into()),
        },
    }
}

/// `airlock revoke IDENTITY`.
pub fn revoke(file: &ConfigFile, identity: &str, path: Option<PathBuf>) -> ExitCode {
    let store = match key_store(file, path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match store.revoke(identity) {
        Ok(0) => {
            eprintln!(
                "error: {} has no key for {}",
                store.location(),
                visible(identity)
            );
            ExitCode::from(1)
        }
        Ok(n) => {
            println!(
                "revoked {n} key(s) of {} in {}; servers drop them when they re-read the keys (kill -HUP, or within 5 s from PostgreSQL)",
                visible(identity),
                store.location()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `airlock enroll`: a key into the enrollment file named, else into the
/// state backend when it keeps keys (PostgreSQL).
pub fn enroll(file: &ConfigFile, identity: &str, path: Option<PathBuf>, console: bool) -> ExitCode {
    let store = match key_store(file, path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let use_ = if console {
        keys::KeyUse::Console
    } else {
        keys::KeyUse::Agent
    };
    match keys::enroll_for(&*store, identity, use_) {
        Ok(key) => {
            println!("{key}");
            eprintln!(
                "enrolled {identity} in {}; give this key to {} (it is shown only once)",
                store.location(),
                if console {
                    "the person, for the operator console at /console"
                } else {
                    "the client"
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

pub(crate) fn state(file: &ConfigFile) -> Result<State, String> {
    let (config, place) = file.gateway().map_err(|e| e.to_string())?;
    place.open(&config.approval).map_err(|e| e.to_string())
}

/// One request as a line for a terminal. Summaries are filed escaped;
/// escaping every field again here (a no-op on escaped text) keeps a row
/// from an older version, or written by hand, from acting on the terminal.
fn describe(r: &Request, now: i64) -> String {
    let left = (r.expires_ms - now).max(0) / 1000;
    if let Some(changes) = &r.changes {
        let n = changes.iter().filter(|c| c.is_change()).count();
        let reads = match changes.len() - n {
            0 => String::new(),
            1 => " and 1 read of a task".into(),
            k => format!(" and {k} reads of tasks"),
        };
        return format!(
            "{}  {:<9} {} plans {n} change{}{reads} (approved or denied as a whole)  expires in {}m{:02}s\n{}",
            visible(&r.id),
            r.status.as_str(),
            visible(&r.identity),
            if n == 1 { "" } else { "s" },
            left / 60,
            left % 60,
            crate::plans::table(changes).trim_end()
        );
    }
    format!(
        "{}  {:<9} {} wants {}({})  expires in {}m{:02}s",
        visible(&r.id),
        format!("{:?}", r.status).to_lowercase(),
        visible(&r.identity),
        visible(&r.tool),
        visible(&r.summary),
        left / 60,
        left % 60
    )
}

/// A request whole, for `approvals show`: its line, then every argument
/// in full (escaped as summaries are), and who decided through what.
fn show(r: &Request, now: i64) -> String {
    let mut out = describe(r, now);
    out.push('\n');
    match &r.changes {
        Some(changes) => {
            for c in changes {
                out.push_str(&format!(
                    "\nchange {} ({}, key {}):\n  {}\n",
                    c.n,
                    visible(&c.tool),
                    visible(if c.key.is_empty() { &c.tool } else { &c.key }),
                    visible(c.detail.as_deref().unwrap_or(&c.summary))
                ));
            }
        }
        None => out.push_str(&format!(
            "\ntool {} (key {}):\n  {}\n",
            visible(&r.tool),
            visible(r.tool_key.as_deref().unwrap_or("none")),
            visible(r.detail.as_deref().unwrap_or(&r.summary))
        )),
    }
    out.push_str(&format!("\nasked by {}", visible(&r.identity)));
    if let Some(by) = &r.decided_by {
        out.push_str(&format!(
            "; {} by {} ({}{})",
            r.status.as_str(),
            visible(by),
            visible(r.decided_via.as_deref().unwrap_or("unknown channel")),
            if r.decided_by_requester() {
                ", the requester"
            } else {
                ""
            }
        ));
    }
    if let Some(reason) = &r.reason {
        out.push_str(&format!(": \"{}\"", visible(reason)));
    }
    out
}

pub fn approvals(file: &ConfigFile, action: ApprovalAction) -> ExitCode {
    let (config, state) = match file
        .gateway()
        .map_err(|e| e.to_string())
        .and_then(|(c, place)| {
            place
                .open(&c.approval)
                .map(|s| (c, s))
                .map_err(|e| e.to_string())
        }) {
        Ok((c, s)) => (c, s),
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
    let (store, audit) = (state.approvals, state.audit);
    // Four eyes: `--by` may approve a request it asked itself only when
    // `[identities]` allows that identity (`approve_own`). An issuer's or
    // group's `approve_own` is not seen here (no token): it applies in
    // the client.
    // `--by` is first made the identity it names (`approvers`): `Olga`
    // is `olga`, and a name that is nobody's is refused before any id.
    let decider = |by: Option<&str>, reason: &str, id: &str| -> Result<Decider, ApprovalError> {
        let by = known.decider(by).map_err(ApprovalError::Approver)?;
        let by = by.as_str();
        let asked_by = store.get(id)?.identity;
        let own = config
            .policy
            .identities
            .get(&asked_by)
            .and_then(|g| g.approve_own)
            .unwrap_or(false);
        Decider::cli(by).allowing_own(own).with_reason(reason)
    };
    let now = now_ms();
    // Each id is decided on its own: one unknown or expired id does not
    // stop the others, and the exit code says whether any failed.
    let each = |ids: Vec<String>, decide: &dyn Fn(&str) -> Result<(), ApprovalError>| {
        let mut failed = false;
        for id in ids {
            if let Err(e) = decide(&id) {
                eprintln!("error: {e}");
                failed = true;
            }
        }
        if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    };
    let result = match action {
        ApprovalAction::Approve { ids, by, reason } => {
            return each(ids, &|id| {
                let d = decider(by.as_deref(), &reason, id)?;
                let r = decision::decide(&*store, &*audit, id, &d, now, Status::Approved)?;
                println!("approved: {}", describe(&r, now));
                if r.changes.is_some() {
                    println!("the same script, run by the same identity with this plan, now makes these changes once");
                } else {
                    println!("the same call, by the same identity, now runs once");
                }
                Ok(())
            })
        }
        ApprovalAction::Deny { ids, by, reason } => {
            return each(ids, &|id| {
                let d = decider(by.as_deref(), &reason, id)?;
                let r = decision::decide(&*store, &*audit, id, &d, now, Status::Denied)?;
                println!("denied: {}", describe(&r, now));
                Ok(())
            })
        }
        ApprovalAction::Show { id } => store.get(&id).map(|r| println!("{}", show(&r, now))),
        ApprovalAction::List { all, ids: true, .. } => store.list(now, all).map(|list| {
            for r in list.iter().filter(|r| r.status == Status::Pending) {
                println!("{}", visible(&r.id));
            }
        }),
        ApprovalAction::List { all, json, .. } => store.list(now, all).map(|list| {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).expect("requests serialize")
                );
            } else if list.is_empty() {
                println!("no open approval requests");
            } else {
                for r in &list {
                    println!("{}", describe(r, now));
                }
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

pub fn audit(file: &ConfigFile, action: AuditAction) -> ExitCode {
    match action {
        AuditAction::Verify { file: Some(path) } => {
            let store = state(file).ok().map(|s| s.runbooks);
            report(
                audit::verify(&path),
                &path.display().to_string(),
                store.as_deref(),
            )
        }
        AuditAction::Verify { file: None } => match state(file) {
            Ok(s) => report(s.audit.verify(), &s.audit.location(), Some(&*s.runbooks)),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        AuditAction::Export { output } => export(file, output),
        AuditAction::Close { older_than } => close(file, older_than),
    }
}

/// `airlock audit close`: what `verify` notes as unfinished, ended.
fn close(file: &ConfigFile, older_than: std::time::Duration) -> ExitCode {
    let s = match state(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let verdict = match s.audit.verify() {
        Ok(v) if v.ok() => v,
        Ok(v) => {
            let (line, why) = v.problem.unwrap_or_default();
            eprintln!("error: the chain in {} is broken at line {line} ({why}); nothing was written. Run `airlock audit verify` and look into it first", s.audit.location());
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cutoff = std::time::SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(std::time::UNIX_EPOCH);
    let (mut closed, mut young, mut waiting) = (0usize, 0usize, 0usize);
    // A parked execution waits for decisions in the state (or is being
    // resumed from it): not lost while it may still be followed.
    let parked: std::collections::HashSet<String> =
        match s
            .parked
            .list(None, now_ms(), 100 * crate::durable::PARKED_TOTAL as u32)
        {
            Ok(rows) => rows.into_iter().map(|r| r.execution).collect(),
            Err(e) => {
                eprintln!("error: {e}; nothing was written");
                return ExitCode::from(2);
            }
        };
    for u in &verdict.unfinished {
        if parked.contains(&u.execution) {
            waiting += 1;
            continue;
        }
        // A start line whose time cannot be read is old enough: it is
        // not one a running process just wrote.
        let started = humantime::parse_rfc3339(&u.started).unwrap_or(std::time::UNIX_EPOCH);
        if started > cutoff {
            young += 1;
            continue;
        }
        let mut line = serde_json::Map::new();
        line.insert("execution".into(), u.execution.clone().into());
        if let Some(identity) = &u.identity {
            line.insert("identity".into(), identity.clone().into());
        }
        line.insert("outcome".into(), "unknown".into());
        line.insert(
            "closed_by".into(),
            "airlock audit close: no end line; its process stopped without writing one".into(),
        );
        if let Err(e) = s.audit.append("execution_end", line) {
            eprintln!("error: closed {closed}, then: {e}");
            return ExitCode::from(2);
        }
        closed += 1;
    }
    println!(
        "closed {closed} execution(s) with outcome unknown in {}; left {young} younger than {} and {waiting} waiting for decisions",
        s.audit.location(),
        humantime::format_duration(older_than)
    );
    ExitCode::SUCCESS
}

fn report(
    verdict: Result<audit::Verdict, audit::AuditError>,
    at: &str,
    runbooks: Option<&dyn RunbookStore>,
) -> ExitCode {
    match verdict {
        Ok(v) if v.ok() => {
            println!(
                "ok: {} lines verified in {at}; head seq {} hash {}",
                v.good_lines, v.head.seq, v.head.hash
            );
            unfinished(&v.unfinished);
            if v.plans_unchecked > 0 {
                println!(
                    "note: {} change plan(s) were not checked against their lines: more than {} were open at once",
                    v.plans_unchecked,
                    audit::MAX_TRACKED_PLANS
                );
            }
            let people = four_eyes(&v);
            let sends = sent_twice(&v);
            let runbooks = runbook_claims(&v, runbooks);
            if people != ExitCode::SUCCESS {
                return people;
            }
            if sends != ExitCode::SUCCESS {
                return sends;
            }
            runbooks
        }
        Ok(v) => {
            let (line, why) = v.problem.expect("not ok means a problem");
            println!("BROKEN at line {line} of {at}: {why}");
            println!(
                "lines 1-{} verify (head seq {} hash {})",
                v.good_lines, v.head.seq, v.head.hash
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Lines where one person approved their own request, version or call
/// under another spelling of their name (`audit_people`).
fn four_eyes(v: &audit::Verdict) -> ExitCode {
    if v.four_eyes.is_empty() {
        return ExitCode::SUCCESS;
    }
    for (line, why) in v.four_eyes.iter().take(20) {
        println!("FOUR EYES line {line}: {}", visible(why));
    }
    let all = v.four_eyes.len() as u64 + v.four_eyes_more;
    if all > 20 {
        println!("... and {} more", all - 20);
    }
    println!("{all} approval(s) were given by the person who asked, wrote or ran what was approved, under another spelling of their name; the chain itself verifies");
    ExitCode::from(1)
}

/// Lines where an execution sent one of its changes a second time
/// (`audit_sends`).
fn sent_twice(v: &audit::Verdict) -> ExitCode {
    // Not checked is not passed: fail closed.
    let unchecked = v.sends_unchecked > 0;
    if unchecked {
        println!(
            "UNCHECKED: {} change(s) were not checked for being sent twice: executions with more than {} changes were open at once (`airlock audit close` ends the ones that will never end; then verify again)",
            v.sends_unchecked,
            airlock_gateway::audit_sends::MAX_CALLS
        );
    }
    if v.sent_twice.is_empty() {
        return if unchecked {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    for (line, why) in v.sent_twice.iter().take(20) {
        println!("SENT TWICE line {line}: {}", visible(why));
    }
    let all = v.sent_twice.len() as u64 + v.sent_twice_more;
    if all > 20 {
        println!("... and {} more", all - 20);
    }
    println!("{all} change(s) were sent a second time by the execution that made them; the chain itself verifies");
    ExitCode::from(1)
}

/// Holds the calls made under runbook runs to their versions' files.
fn runbook_claims(v: &audit::Verdict, store: Option<&dyn RunbookStore>) -> ExitCode {
    use airlock_runbooks::audit_runbooks::{check_claims, Known, MAX_CLAIMS};
    if v.runbook_claims.is_empty() {
        return ExitCode::SUCCESS;
    }
    let Some(store) = store else {
        println!(
            "note: {} call(s) made under runbooks were not checked: the runbook store could not be opened with this configuration",
            v.runbook_claims.len()
        );
        return ExitCode::SUCCESS;
    };
    let mut unreadable = None;
    let problems = check_claims(&v.runbook_claims, |name, version| {
        let versions = store
            .versions(name)
            .map_err(|e| unreadable = Some(e.to_string()))
            .ok()?;
        let s = versions.into_iter().find(|s| s.version == version)?;
        let runbook = Runbook::parse(&s.text).ok()?;
        Some(Known {
            runbook,
            approved: s.approved_by.is_some(),
        })
    });
    if let Some(e) = unreadable {
        eprintln!("error: checking runbook calls: {e}");
        return ExitCode::from(2);
    }
    let runs: std::collections::HashSet<&str> =
        v.runbook_claims.iter().map(|c| c.run.as_str()).collect();
    if v.runbooks_unchecked > 0 {
        println!(
            "note: {} call(s) made under runbooks were not checked: more than {MAX_CLAIMS} were in the range",
            v.runbooks_unchecked
        );
    }
    if problems.is_empty() {
        println!(
            "ok: {} call(s) of {} runbook run(s) stayed inside their versions' files",
            v.runbook_claims.len(),
            runs.len()
        );
        return ExitCode::SUCCESS;
    }
    for (line, why) in problems.iter().take(20) {
        println!("RUNBOOK line {line}: {}", visible(why));
    }
    if problems.len() > 20 {
        println!("... and {} more", problems.len() - 20);
    }
    println!(
        "{} call(s) claimed under runbooks broke their versions' files; the chain itself verifies",
        problems.len()
    );
    ExitCode::from(1)
}

/// Executions with a start line and no end: not a broken chain, but worth
/// a look (a replica killed mid-run leaves these).
fn unfinished(open: &[audit::Unfinished]) {
    const SHOWN: usize = 10;
    if open.is_empty() {
        return;
    }
    let shown: Vec<String> = open
        .iter()
        .take(SHOWN)
        .map(|u| visible(&u.execution))
        .collect();
    println!(
        "note: {} execution(s) started and have no end line: still running, or their process was killed before writing it (`airlock audit close` ends those older than an hour): {}{}",
        open.len(),
        shown.join(", "),
        if open.len() > SHOWN { ", ..." } else { "" }
    );
}

fn export(file: &ConfigFile, output: Option<PathBuf>) -> ExitCode {
    let s = match state(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let written = match &output {
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            s.audit.export(&mut out)
        }
        Some(path) => {
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(airlock_edge::private_files::FILE_MODE)
                .open(path);
            match created {
                Ok(f) => s.audit.export(&mut std::io::BufWriter::new(f)),
                Err(e) => {
                    eprintln!(
                        "error: cannot create {} ({e}); name a file that does not exist yet",
                        path.display()
                    );
                    return ExitCode::from(2);
                }
            }
        }
    };
    match written {
        Ok(bytes) => {
            if let Some(path) = &output {
                eprintln!(
                    "exported {bytes} bytes of the audit chain in {} to {}",
                    s.audit.location(),
                    path.display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
