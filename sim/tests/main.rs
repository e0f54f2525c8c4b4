//! The simulator's integration tests, one binary (each file a module): one link of the crate
//! and its dependencies instead of one per file.

mod http;
mod timeout;
