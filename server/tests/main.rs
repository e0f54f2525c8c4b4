//! The server's integration tests, one binary. Each file here is a module of it, except the
//! few that change something of the whole process (listed in server/Cargo.toml, each a binary
//! of its own). One binary instead of one per file: every binary links the whole server, and
//! ~45 of them took most of a CI run's build time and gigabytes of disk; a module costs
//! neither. Every test still makes its own redis-server, router or `repoll` process.

mod common;

mod admin_answers;
mod admin_attention;
mod admin_auth;
mod admin_bulk;
mod admin_hostile_dead;
mod admin_list_rows;
mod admin_pages;
mod admin_roles;
mod admin_search;
mod admin_selection;
mod admin_sessions;
mod admin_streams;
mod admin_upstreams;
mod api;
mod api_callbacks;
mod api_events;
mod api_freshness;
mod api_freshness_directives;
mod api_identity;
mod api_limits;
mod api_wait;
mod cache_status_forwarded;
mod cluster_process;
mod docs_links;
mod freshness_pages;
mod hostile_load;
mod http_server;
mod import_layers;
mod live_streams;
mod managed_redis;
mod openapi_document;
mod page_nonce;
mod process;
mod process_features;
mod process_freshness;
mod process_jobs;
mod process_repartition;
mod process_settings;
mod process_startup;
mod process_webhooks;
mod prometheus_alerts;
mod promises_refs;
mod readme_defaults;
mod refresh_metrics;
mod request_lines;
mod theme;
mod trace_collector_down;
mod web;
mod web_answers;
mod worker_control;
mod worker_process;
