//! Key layout. Every key starts with the hash tag `{name}` so a Redis Cluster keeps the whole
//! queue in one slot (Lua scripts may only touch keys of one slot). Scripts never build key
//! names: Rust builds them here and passes them in KEYS. See ARCHITECTURE.md for the table.

/// Key names of one queue.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    tag: String,
    pub due: String,
    pub lease: String,
    pub dead: String,
    pub retry: String,
    pub results: String,
    pub events: String,
    pub paused: String,
    pub token: String,
    pub tp: String,
    pub tpmin: String,
    pub workers: String,
    /// Rate limiter of upstream calls (GCRA arrival time), shared by all workers.
    pub upstream_rate: String,
}

impl Keys {
    pub fn new(name: &str) -> Keys {
        let tag = format!("{{{name}}}");
        let k = |s: &str| format!("{tag}:{s}");
        Keys {
            due: k("due"),
            lease: k("lease"),
            dead: k("dead"),
            retry: k("retry"),
            results: k("results"),
            events: k("events"),
            paused: k("paused"),
            token: k("token"),
            tp: k("tp"),
            tpmin: k("tpmin"),
            workers: k("workers"),
            upstream_rate: k("upstream_rate"),
            tag,
        }
    }

    /// Task record (hash) of a live task: due, leased or dead.
    pub fn task(&self, id: &str) -> String {
        format!("{}:t:{id}", self.tag)
    }

    /// Capped per-task history list.
    pub fn hist(&self, id: &str) -> String {
        format!("{}:h:{id}", self.tag)
    }

    /// Final result hash (expires after result_ttl_ms).
    pub fn result(&self, id: &str) -> String {
        format!("{}:r:{id}", self.tag)
    }

    /// Worker heartbeat hash (expires when heartbeats stop).
    pub fn worker(&self, id: &str) -> String {
        format!("{}:w:{id}", self.tag)
    }
}
