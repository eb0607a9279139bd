//! The contract between the Airlock sandbox (host) and its JavaScript guest.
//!
//! Both sides compile this crate: the guest (`guest/`, built for
//! `wasm32-wasip1`) to declare its imports and exports, and the sandbox to
//! link against them. Keeping the names, layouts and codes in one place means
//! a change to the ABI is a compile error on both sides rather than a trap at
//! run time. [`fit`] is the one rule both sides apply to what the guest
//! hands over (results cut to their limit, texts capped); the `host` feature
//! adds [`wire`], the host's decoders for it.

pub mod abi;
pub mod fit;
#[cfg(feature = "host")]
pub mod wire;
