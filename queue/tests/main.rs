//! The queue crate's integration tests, one binary: each file here is a module of it, except
//! the few that change something of the whole process (listed in queue/Cargo.toml, each a
//! binary of its own). One binary, not one per file: each would link the crate and its
//! dependencies again, and a module costs neither. The tests share one private redis-server
//! (common/mod.rs) and keep apart by queue name.

mod common;

mod admin;
mod answer_counts;
mod breaker;
mod bulk;
mod bulk_chosen;
mod callback;
mod cluster;
mod concurrency;
mod dashboard_feed;
mod dead_counts;
mod facets;
mod failover;
mod fair;
mod freshness;
mod functions;
mod hot_results;
mod lean;
mod lean_stats;
mod lifecycle;
mod listing;
mod model_prop;
mod partitions;
mod scripts_keys;
mod task_story;
mod wakeups;
mod webhooks;
