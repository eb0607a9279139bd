//! Operator commands: deciding approvals and verifying the audit log.
//! They work on the state directory directly, so they can run while a
//! server is running.

use std::{path::PathBuf, process::ExitCode};

use airlock_gateway::{
    approval::{ApprovalStore, Request},
    audit,
    visible::visible,
};
use clap::Subcommand;

use crate::settings::ConfigFile;

#[derive(Subcommand)]
pub enum ApprovalAction {
    /// Requests waiting for a decision (and approvals not yet used).
    List {
        /// Include decided, used and expired requests.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Allow the one call a request describes.
    Approve {
        id: String,
        /// Who decided (recorded with the request).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
    },
    /// Refuse it.
    Deny {
        id: String,
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
    },
}

#[derive(Subcommand)]
pub enum AuditAction {
    /// Check every line's hash and link; report the first broken line.
    Verify {
        /// The log to check (default: the configured audit log).
        file: Option<PathBuf>,
    },
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn store(file: &ConfigFile) -> Result<ApprovalStore, String> {
    let config = file.gateway().map_err(|e| e.to_string())?;
    ApprovalStore::open(
        &config.approvals_db,
        (config.approval.ttl_secs as i64).saturating_mul(1000),
    )
    .map_err(|e| e.to_string())
}

/// One request as a line for a terminal. Summaries are filed escaped;
/// escaping every field again here (a no-op on escaped text) keeps a row
/// from an older version, or written by hand, from acting on the terminal.
fn describe(r: &Request, now: i64) -> String {
    let left = (r.expires_ms - now).max(0) / 1000;
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

pub fn approvals(file: &ConfigFile, action: ApprovalAction) -> ExitCode {
    let store = match store(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let now = now_ms();
    let result = match action {
        ApprovalAction::List { all, json } => store.list(now, all).map(|list| {
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
        ApprovalAction::Approve { id, by } => store.approve(&id, &by, now).map(|r| {
            println!("approved: {}", describe(&r, now));
            println!("the same call, by the same identity, now runs once");
        }),
        ApprovalAction::Deny { id, by } => store
            .deny(&id, &by, now)
            .map(|r| println!("denied: {}", describe(&r, now))),
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
    let AuditAction::Verify { file: path } = action;
    let path = match path {
        Some(p) => p,
        None => match file.gateway() {
            Ok(g) => g.audit_file,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
    };
    match audit::verify(&path) {
        Ok(v) if v.ok() => {
            println!(
                "ok: {} lines verified in {}; head seq {} hash {}",
                v.good_lines,
                path.display(),
                v.head.seq,
                v.head.hash
            );
            ExitCode::SUCCESS
        }
        Ok(v) => {
            let (line, why) = v.problem.expect("not ok means a problem");
            println!("BROKEN at line {line} of {}: {why}", path.display());
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
