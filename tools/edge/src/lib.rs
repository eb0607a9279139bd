//! What every part that reaches an outside system needs, in one place
//! so that each backend does it the same careful way: credential files
//! read only when their owner and mode keep them private
//! (`credential_file`), state files written for the owner alone
//! (`private_files`), TLS pinned to a certificate's fingerprint
//! (`tls`), and JSON from a backend parsed under a budget of values, off
//! the async threads (`json_budget`).
//!
//! This crate knows files, certificates and JSON. It does not know
//! tools, identities or what a backend is for.

pub mod credential_file;
pub mod json_budget;
pub mod private_files;
pub mod tls;
