//! Key layout. Every key starts with the hash tag `{name}` so a Redis Cluster keeps the whole
//! queue in one slot (Lua scripts may only touch keys of one slot). Rust builds every key name
//! here and passes them in KEYS, by the names the scripts' headers declare ([`Keys::named`],
//! key_decl.rs); the few scripts that find task ids inside Redis (claims, stats,
//! the ready-list purge) derive those tasks' keys from [`Keys::prefix`] with the same layout,
//! as their headers say. See ARCHITECTURE.md for the table.

/// Key names of one queue.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    tag: String,
    /// `{name}:`, the prefix of per-task keys, for scripts that derive them.
    pub prefix: String,
    /// Interactive tasks ready now, oldest first (a LIST: far cheaper than a zset member).
    pub ready: String,
    /// Background tasks ready now, oldest first.
    pub ready_bg: String,
    /// Interactive claims since the last background one (the background share).
    pub share: String,
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
    /// Per-hour throughput counters, rolled up from the minutes by reap after a day.
    pub tphour: String,
    /// Index of `tphour` (hours and histogram fields, scored by hour) for trimming after a week.
    pub tphourix: String,
    /// The worker registry (`registry.rs`): worker id -> last seen.
    pub workers: String,
    /// The web process registry (`registry.rs`): process id -> last seen.
    pub webs: String,
    /// The upstream's circuit breaker (a hash; absent = closed): prelude/breaker.lua.
    pub breaker: String,
    /// Rate limiter of upstream calls (GCRA arrival time), shared by all workers.
    pub upstream_rate: String,
    /// Wake-up list: one entry per task made ready now; idle worker processes block on it
    /// (BLPOP), so each entry wakes one of them (prelude/history.lua, `wake_workers`).
    pub wakeups: String,
    /// Admin actions, newest first, capped (audit.rs).
    pub audit: String,
    /// Fair shares (prelude/fair.lua): tenants' interactive tasks ready now,
    /// `"<tenant>|<id>"` scored by start tag.
    pub fair: String,
    /// Each tenant with a backlog -> its latest start tag ('' = the untenanted lane).
    pub fairt: String,
    /// The largest start tag claimed so far (the fair queue's virtual time).
    pub fairv: String,
    /// Tenant -> leases it holds (per-tenant concurrency cap).
    pub fairc: String,
    /// Tenant -> GCRA arrival time of its next claim (per-tenant rate).
    pub fairr: String,
    /// A job API's jobs to cancel upstream, `<tries>|<id>|<job>` scored by when (cancel.lua,
    /// purge.lua; cancel_take.lua, cancel_settle.lua).
    pub cancels: String,
}

impl Keys {
    /// The keys of a queue of one partition, or the control keys of a partitioned one.
    pub fn new(name: &str) -> Keys {
        Keys::with_tag(format!("{{{name}}}"))
    }

    /// The keys of partition `i` of `n`: the hash tag [`partition_tag`].
    pub fn partition(name: &str, i: usize, n: usize) -> Keys {
        Keys::with_tag(partition_tag(name, i, n))
    }

    /// The keys of slot `i` of a queue of `n` partitions: the queue's own tag `{name}` when
    /// it has one partition (so data written before partitions existed is found), else
    /// partition `i`'s tag.
    pub fn slot(name: &str, i: usize, n: usize) -> Keys {
        if n <= 1 {
            Keys::new(name)
        } else {
            Keys::partition(name, i, n)
        }
    }

    /// This queue's hash tag, braces included.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Which partition count a queue was first used with (a hash, field `partitions`), so a
    /// process configured with another count refuses to start instead of looking for tasks
    /// where they are not (`partition::check_layout`). Under the control tag it is the
    /// queue's record (with `moving_to` while a repartition runs); under a partition's tag it
    /// is that slot's copy of the count, which a repartition writes (`repartition.rs`) so that
    /// an enqueue can check, in its own slot, that the queue still has its process's layout.
    pub fn meta(&self) -> String {
        format!("{}:meta", self.tag)
    }

    fn with_tag(tag: String) -> Keys {
        let k = |s: &str| format!("{tag}:{s}");
        Keys {
            prefix: format!("{tag}:"),
            ready: k("ready"),
            ready_bg: k("ready:bg"),
            share: k("share"),
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
            tphour: k("tphour"),
            tphourix: k("tphourix"),
            workers: k("workers"),
            webs: k("webs"),
            breaker: k("breaker"),
            upstream_rate: k("upstream_rate"),
            wakeups: k("wakeups"),
            audit: k("audit"),
            fair: k("fair"),
            fairt: k("fairt"),
            fairv: k("fairv"),
            fairc: k("fairc"),
            fairr: k("fairr"),
            cancels: k("cancels"),
            tag,
        }
    }

    /// The key a function's header declares by `name` (key_decl.rs): a key of this layout, or
    /// one of the call's task `id` (`task`, `hist`, `result`, `partial`, `worker`). None for a
    /// name the layout does not have, or a task's key without an id.
    pub fn named(&self, name: &str, id: Option<&str>) -> Option<String> {
        let key = match name {
            "ready" => &self.ready,
            "ready_bg" => &self.ready_bg,
            "share" => &self.share,
            "due" => &self.due,
            "lease" => &self.lease,
            "dead" => &self.dead,
            "retry" => &self.retry,
            "results" => &self.results,
            "events" => &self.events,
            "paused" => &self.paused,
            "token" => &self.token,
            "tp" => &self.tp,
            "tpmin" => &self.tpmin,
            "tphour" => &self.tphour,
            "tphourix" => &self.tphourix,
            "workers" => &self.workers,
            "webs" => &self.webs,
            "breaker" => &self.breaker,
            "upstream_rate" => &self.upstream_rate,
            "wakeups" => &self.wakeups,
            "audit" => &self.audit,
            "fair" => &self.fair,
            "fairt" => &self.fairt,
            "fairv" => &self.fairv,
            "fairc" => &self.fairc,
            "fairr" => &self.fairr,
            "cancels" => &self.cancels,
            "meta" => return Some(self.meta()),
            _ => {
                let id = id?;
                return match name {
                    "task" => Some(self.task(id)),
                    "hist" => Some(self.hist(id)),
                    "result" => Some(self.result(id)),
                    "partial" => Some(self.partial(id)),
                    "worker" => Some(self.worker(id)),
                    _ => None,
                };
            }
        };
        Some(key.clone())
    }

    /// Task record (compact hash, short field names: prelude.lua) of a live task.
    pub fn task(&self, id: &str) -> String {
        format!("{}:t:{id}", self.tag)
    }

    /// Capped per-task history list.
    pub fn hist(&self, id: &str) -> String {
        format!("{}:h:{id}", self.tag)
    }

    /// Final result, one string (expires at the end of its last window,
    /// `QueueConfig::result_life_ms`; decode.rs has the format).
    pub fn result(&self, id: &str) -> String {
        format!("{}:r:{id}", self.tag)
    }

    /// A job API's job → task index entry (callback.rs `index_job`): `"<created> <id>"`, with
    /// a life of its own. The job reference is at most 2048 bytes (worker's MAX_JOB_BYTES).
    pub fn job_index(&self, job: &str) -> String {
        format!("{}:jx:{job}", self.tag)
    }

    /// A provider's webhook id, remembered for a while once its change is made (callback.lua).
    pub fn webhook_seen(&self, webhook_id: &str) -> String {
        format!("{}:wh:{webhook_id}", self.tag)
    }

    /// Latest partial data of a live task (a string of its own: a long value inside the record
    /// would turn the whole hash from listpack into hashtable encoding).
    pub fn partial(&self, id: &str) -> String {
        format!("{}:p:{id}", self.tag)
    }

    /// A `SCAN MATCH` pattern for the live-task and result keys whose id starts with
    /// `id_prefix` (lowercase hex: no glob characters), the queue name escaped for globbing.
    pub fn task_or_result_pattern(&self, id_prefix: &str) -> String {
        let tag: String = self
            .tag
            .chars()
            .flat_map(|c| match c {
                '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        format!("{tag}:[tr]:{id_prefix}*")
    }

    /// [`Keys::task_or_result_pattern`] over every partition of a partitioned queue whose
    /// control keys these are (`{name#<i>}:[tr]:<id_prefix>*`).
    pub fn any_partition_task_or_result_pattern(&self, id_prefix: &str) -> String {
        let escaped = self.task_or_result_pattern(id_prefix);
        // "{name}:[tr]:…" -> "{name#*}:[tr]:…"
        match escaped.split_once("}:[tr]:") {
            Some((tag, rest)) => format!("{tag}#*}}:[tr]:{rest}"),
            None => escaped,
        }
    }

    /// The `SCAN MATCH` pattern for the live-task and result keys starting with `id_prefix`
    /// in every slot of a queue of `partitions` partitions whose control keys these are: one
    /// pattern, so one scan of the keyspace finds them all.
    pub fn id_prefix_pattern(&self, id_prefix: &str, partitions: usize) -> String {
        if partitions <= 1 {
            self.task_or_result_pattern(id_prefix)
        } else {
            self.any_partition_task_or_result_pattern(id_prefix)
        }
    }

    /// A dashboard session, by the digest of its cookie id (expires with the session).
    pub fn session(&self, digest: &str) -> String {
        format!("{}:session:{digest}", self.tag)
    }

    /// Every live dashboard session's digest, scored by when it expires (ms): what "sign out
    /// every session" deletes without scanning the keyspace.
    pub fn session_index(&self) -> String {
        format!("{}:sessions", self.tag)
    }

    /// One client's sign-in attempt counter (expires with its one-minute window).
    pub fn sign_in_attempts(&self, client: &str) -> String {
        format!("{}:loginfail:{client}", self.tag)
    }

    /// The (tenant, task id) of a member of [`Keys::fair`], `<tenant>|<id>` (tenant names never
    /// hold `|`; a member without one is read as an id of no tenant).
    pub fn split_fair_member(m: &str) -> (&str, &str) {
        m.rsplit_once('|').unwrap_or(("", m))
    }

    /// Worker heartbeat hash (expires when heartbeats stop).
    pub fn worker(&self, id: &str) -> String {
        format!("{}:w:{id}", self.tag)
    }

    /// Web process heartbeat hash (expires when heartbeats stop).
    pub fn web(&self, id: &str) -> String {
        format!("{}:web:{id}", self.tag)
    }
}

/// The hash tag of partition `i` of `n` of queue `name`: `{name#i}`, or `{name#i.k}` with the
/// least `k` that puts it in the i-th n-th of the 16,384 cluster slots. Evenly spaced slots
/// spread the partitions evenly over any cluster whose masters own even, contiguous slot
/// ranges (what `redis-cli --cluster create` makes): P = 12 on 3 masters is 4 + 4 + 4, where
/// plain `{name#i}` tags fall where their CRC16 lands (7 + 3 + 2 for some names). Queue names
/// never hold `#`, so no other queue's tag can be the same. Fixed forever: every process must
/// compute the same tags.
pub fn partition_tag(name: &str, i: usize, n: usize) -> String {
    const SLOTS: usize = 16_384;
    let n = n.clamp(1, SLOTS);
    let (lo, hi) = (i * SLOTS / n, (i + 1) * SLOTS / n);
    let fits = |tag: &str| (lo..hi).contains(&usize::from(key_slot(tag.as_bytes())));
    let plain = format!("{name}#{i}");
    if fits(&plain) {
        return format!("{{{plain}}}");
    }
    // A range is 16 slots or more (n <= 1024): about n / 16384 of the suffixes fit, so a few
    // thousand tries at most; the bound only guards against a bug.
    for k in 1..10_000_000u32 {
        let t = format!("{name}#{i}.{k}");
        if fits(&t) {
            return format!("{{{t}}}");
        }
    }
    format!("{{{plain}}}")
}

/// The cluster slot of a hash tag's content: CRC16 (XMODEM) mod 16,384, as Redis computes it
/// (the redis crate computes it too, but does not expose the number).
fn key_slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slot_is_redis_cluster_keyslot() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn partition_tags_spread_evenly_over_the_slots() {
        for n in [2usize, 3, 12, 100] {
            for i in 0..n {
                let t = partition_tag("repoll", i, n);
                let inner = &t[1..t.len() - 1];
                let slot = usize::from(key_slot(inner.as_bytes()));
                assert!((i * 16384 / n..(i + 1) * 16384 / n).contains(&slot), "{t}");
                assert!(inner.starts_with(&format!("repoll#{i}")), "{t}");
            }
        }
    }
}
