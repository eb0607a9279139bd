//! Runbooks: a reviewed TOML file naming the tools a script may call,
//! their tiers and bounds, and `max_changes`; its version is the SHA-256
//! of its bytes, approved once by someone other than its author. This
//! crate reads and checks the file, holds a run's calls to it
//! (`runbook`), stores versions through the `RunbookStore` trait, and
//! says what `audit verify` holds a run's audit lines to
//! (`audit_runbooks`).
//!
//! It knows the catalog (a runbook names tools) and the approver's rules
//! (four eyes, value tags). It does not run scripts (the host does, in
//! a sandbox), store anything itself (`airlock-state` does), or send a
//! call (the gateway does, and asks this crate whether a run may).

pub mod audit_runbooks;
pub mod runbook;
