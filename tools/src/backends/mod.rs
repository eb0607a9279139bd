//! Backends the gateway can call. Each one is a room of its own; the
//! gateway only sees the [`crate::backend::Backend`] trait.

pub mod demo;
