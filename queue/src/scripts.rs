//! The Lua scripts. Each is `prelude.lua` + its own file, compiled into the binary with
//! `include_str!`, hashed once and called with EVALSHA (`redis::Script` falls back to loading
//! on NOSCRIPT, e.g. after a Redis restart). Every script keeps its KEYS/ARGV/returns contract
//! in its header comment.
//!
//! Each script starts with a `#!lua` shebang (Redis 7.0+): with it, Redis Cluster refuses a
//! script whose declared KEYS span two slots instead of running it, and the read-only ones
//! carry `flags=no-writes`, so Redis refuses them any write and lets them run on replicas.

use redis::Script;
use std::sync::LazyLock;

/// Shared helpers prepended to every script.
pub const PRELUDE: &str = include_str!("../lua/prelude.lua");

/// (name, source without prelude) of every script, for tests and docs.
pub const SOURCES: &[(&str, &str)] = &[
    ("enqueue", include_str!("../lua/enqueue.lua")),
    ("claim", include_str!("../lua/claim.lua")),
    ("renew", include_str!("../lua/renew.lua")),
    ("complete", include_str!("../lua/complete.lua")),
    ("reschedule", include_str!("../lua/reschedule.lua")),
    ("fail", include_str!("../lua/fail.lua")),
    ("release", include_str!("../lua/release.lua")),
    ("peek_expired", include_str!("../lua/peek_expired.lua")),
    ("reap", include_str!("../lua/reap.lua")),
    ("retry", include_str!("../lua/retry.lua")),
    ("cancel", include_str!("../lua/cancel.lua")),
    ("pause", include_str!("../lua/pause.lua")),
    ("purge", include_str!("../lua/purge.lua")),
    ("purge_ready", include_str!("../lua/purge_ready.lua")),
    ("stats", include_str!("../lua/stats.lua")),
    ("list", include_str!("../lua/list.lua")),
    ("heartbeat", include_str!("../lua/heartbeat.lua")),
    ("upstream_rate", include_str!("../lua/upstream_rate.lua")),
    ("migrate", include_str!("../lua/migrate.lua")),
    ("callback", include_str!("../lua/callback.lua")),
    ("breaker", include_str!("../lua/breaker.lua")),
    ("fair_sync", include_str!("../lua/fair_sync.lua")),
];

/// Compiled scripts, one field per file.
pub(crate) struct Scripts {
    pub enqueue: Script,
    pub claim: Script,
    pub renew: Script,
    pub complete: Script,
    pub reschedule: Script,
    pub fail: Script,
    pub release: Script,
    pub peek_expired: Script,
    pub reap: Script,
    pub retry: Script,
    pub cancel: Script,
    pub pause: Script,
    pub purge: Script,
    pub purge_ready: Script,
    pub stats: Script,
    pub list: Script,
    pub heartbeat: Script,
    pub upstream_rate: Script,
    pub migrate: Script,
    pub callback: Script,
    pub breaker: Script,
    pub fair_sync: Script,
}

fn build(name: &str) -> Script {
    let body = SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap_or("return redis.error_reply('ERR repoll: unknown script')");
    Script::new(&format!("{}\n{PRELUDE}\n{body}", shebang(name)))
}

/// Scripts that only read.
pub const READ_ONLY: &[&str] = &["peek_expired", "stats", "list"];

/// The first line of a script: `#!lua`, with `flags=no-writes` for the read-only ones.
pub fn shebang(name: &str) -> &'static str {
    if READ_ONLY.contains(&name) {
        "#!lua flags=no-writes"
    } else {
        "#!lua"
    }
}

/// Built once per process: hashing is done here, loading happens on first NOSCRIPT.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    enqueue: build("enqueue"),
    claim: build("claim"),
    renew: build("renew"),
    complete: build("complete"),
    reschedule: build("reschedule"),
    fail: build("fail"),
    release: build("release"),
    peek_expired: build("peek_expired"),
    reap: build("reap"),
    retry: build("retry"),
    cancel: build("cancel"),
    pause: build("pause"),
    purge: build("purge"),
    purge_ready: build("purge_ready"),
    stats: build("stats"),
    list: build("list"),
    heartbeat: build("heartbeat"),
    upstream_rate: build("upstream_rate"),
    migrate: build("migrate"),
    callback: build("callback"),
    breaker: build("breaker"),
    fair_sync: build("fair_sync"),
});

impl Scripts {
    pub fn all(&self) -> [&Script; 22] {
        [
            &self.enqueue,
            &self.claim,
            &self.renew,
            &self.complete,
            &self.reschedule,
            &self.fail,
            &self.release,
            &self.peek_expired,
            &self.reap,
            &self.retry,
            &self.cancel,
            &self.pause,
            &self.purge,
            &self.purge_ready,
            &self.stats,
            &self.list,
            &self.heartbeat,
            &self.upstream_rate,
            &self.migrate,
            &self.callback,
            &self.breaker,
            &self.fair_sync,
        ]
    }
}
