//! The worker crate's integration tests, one binary: each file here is a module of it, except
//! the few that change something of the whole process (listed in worker/Cargo.toml, each a
//! binary of its own). One binary, not one per file: each would link the crate and its
//! dependencies again, and a module costs neither. The tests share one private redis-server
//! (common/mod.rs) and keep apart by queue name.

mod common;

mod bounds;
mod breaker;
mod failover;
mod failover_partitions;
mod fair;
mod faults;
mod http_status;
mod jobs;
mod jobs_cancel;
mod lifecycle;
mod recipes;
mod redirects;
mod result_ttl;
mod wakeups;
