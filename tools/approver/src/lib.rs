//! The person in the loop: who counts as the same person in every
//! four-eyes check (`person`), and what an approver is shown of a call
//! before deciding (`summary`: arguments with secrets as keyed tags and
//! public keys by fingerprint, through `ssh_keys`).
//!
//! This crate knows names and argument values. It does not know where
//! approvals are stored, who may decide them, or how a decision reaches
//! Airlock: that is the gateway's, the console's and the host's.

pub mod person;
pub mod ssh_keys;
pub mod summary;
