//! Read-only operations for the dashboard and the API, one module per job: `stats` (counts),
//! `list` and `ready` (cursor pages), `detail` (one task, stuck leases), `throughput`,
//! `switches` (pause flag, breaker, tenants), `events`; `merge` holds every merge of the
//! slots' answers. What reads no slot (the id-prefix search, the Redis server's facts) is
//! here; the registries of running processes are in `registry`.

mod detail;
mod events;
pub mod facets;
mod list;
pub(crate) mod merge;
mod ready;
mod stats;
mod switches;
mod throughput;

use crate::error::Result;
use crate::model::TaskId;
use crate::Queue;

pub use list::is_list_cursor;

/// Minutes of throughput returned by stats().
pub const STATS_BUCKETS: usize = 60;
/// Most fair-zset members [`Queue::tenants`] counts.
pub const TENANT_SCAN_MAX: usize = 10_000;
/// Largest page list() returns.
pub const MAX_PAGE: usize = 1000;

/// One page of a sorted set: its total between the bounds, whether more follow, (id, score)s.
/// Here, not in `list`, because `list`, `ready` and `merge` all build or read it: in `list` it
/// made `list` and `merge` name each other.
pub(crate) struct ZPage {
    pub(crate) total: u64,
    pub(crate) more: bool,
    pub(crate) rows: Vec<(String, i64)>,
}

impl ZPage {
    /// The cursor of the page's last row ("score:id").
    fn last_cursor(&self) -> Option<String> {
        self.rows.last().map(|(id, s)| format!("{s}:{id}"))
    }
}

impl Queue {
    /// Ids of live tasks and stored results that start with `prefix` (1 to 31 lowercase hex
    /// characters; anything else finds nothing), at most `max` of them, found by a key scan
    /// of at most `scan_calls` `SCAN` calls of ~1000 keys each. The flag is false when the
    /// budget ran out before the whole keyspace was seen (a longer prefix narrows it).
    ///
    /// Why a scan: ids are hashes, so no index orders them; the budget keeps the dashboard's
    /// "find by id prefix" bounded on a large Redis.
    pub async fn ids_with_prefix(
        &self,
        prefix: &str,
        max: usize,
        scan_calls: usize,
    ) -> Result<(Vec<TaskId>, bool)> {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if prefix.is_empty() || prefix.len() >= 32 || !prefix.bytes().all(hex) {
            return Ok((Vec::new(), true));
        }
        // One pattern for all partitions' keys ("{name#<i>}:..."), so one scan of the
        // keyspace finds them all.
        let pattern = self.keys().id_prefix_pattern(prefix, self.partitions());
        let mut c = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut found = std::collections::BTreeSet::new();
        for _ in 0..scan_calls.max(1) {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut c)
                .await?;
            found.extend(
                keys.iter()
                    .filter_map(|k| k.rsplit(':').next())
                    .filter_map(|id| TaskId::parse(id).ok()),
            );
            if next == 0 || found.len() >= max {
                return Ok((found.into_iter().take(max).collect(), true));
            }
            cursor = next;
        }
        Ok((found.into_iter().take(max).collect(), false))
    }

    /// Which Redis this is: its version, key count and clock (the dashboard's Redis panel).
    pub async fn server_info(&self) -> Result<ServerInfo> {
        let mut c = self.conn.clone();
        let (info, keys, time): (String, u64, (i64, i64)) = redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("DBSIZE")
            .cmd("TIME")
            .query_async(&mut c)
            .await?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        Ok(ServerInfo {
            version,
            keys,
            now_ms: time.0 * 1000 + time.1 / 1000,
        })
    }
}

/// What [`Queue::server_info`] tells about the Redis server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// `redis_version` from `INFO server`.
    pub version: String,
    /// `DBSIZE` of the selected database.
    pub keys: u64,
    /// Redis time in ms.
    pub now_ms: i64,
}
