//! The contract between the Airlock sandbox (host) and its JavaScript guest.
//!
//! Both sides compile this crate: the guest (`guest/`, built for
//! `wasm32-wasip1`) to declare its imports and exports, and the sandbox to
//! link against them. Keeping the names, layouts and codes in one place means
//! a change to the ABI is a compile error on both sides rather than a trap at
//! run time. The guest compiles it without dependencies; the `host` feature
//! adds [`wire`], the host's decoders for what the guest hands over.

pub mod abi;
#[cfg(feature = "host")]
pub mod wire;
