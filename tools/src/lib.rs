//! Tool catalog and gateway (see README.md).
