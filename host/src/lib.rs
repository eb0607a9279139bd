//! The `airlock` binary's parts, as a library so end-to-end tests can wire
//! the same pieces: configuration, gateway and sandbox wiring, the
//! simulated-cluster demo, and the command-line commands.

pub mod admin;
pub mod approvers;
pub mod bench;
pub mod checkpoints;
pub mod demo;
pub mod door;
pub mod durable;
pub mod execution;
pub mod executions_admin;
pub mod exposition;
pub mod health;
pub mod http;
pub mod limits_report;
pub mod listener;
pub mod log_output;
pub mod lookup;
pub mod mcp;
pub mod metrics;
pub mod plans;
pub mod report;
pub mod run;
pub mod runbook_admin;
pub mod runbooks;
pub mod serve;
pub mod sessions;
pub mod settings;
pub mod shutdown;
pub mod stdio;
pub mod wiring;
