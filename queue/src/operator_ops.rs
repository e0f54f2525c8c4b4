//! Admin operations. Each records who did it in the task history and the global event
//! stream. Bulk ones (retry_all_dead, purge) work in chunks of [`CHUNK`] ids per script call,
//! looping from Rust, so Redis is never blocked for long whatever the queue size.

use crate::decode::{array, int, string};
use crate::error::{corrupt, Result};
use crate::model::{PurgeTarget, TaskId};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use redis::AsyncCommands;

/// Ids per bulk script call.
pub const CHUNK: usize = 500;

impl Queue {
    /// Runs a dead task again (attempts and lease losses reset), or makes a waiting task
    /// due now. Ok(false) for ready, leased, finished or unknown ids.
    pub async fn retry(&self, id: &str, who: &str) -> Result<bool> {
        Ok(self.retry_ids(&[id.to_string()], who, "any").await? > 0)
    }

    /// Retries every dead task; returns how many.
    pub async fn retry_all_dead(&self, who: &str) -> Result<u64> {
        if let Some(parts) = self.parts() {
            let n = Queue::fan(parts, |p| async move { p.retry_all_dead_one(who).await }).await?;
            return Ok(n.into_iter().sum());
        }
        self.retry_all_dead_one(who).await
    }

    /// [`Queue::retry_all_dead`] on this partition alone (or the whole queue of one partition).
    async fn retry_all_dead_one(&self, who: &str) -> Result<u64> {
        let mut total = 0;
        loop {
            let ids = self.zrange_chunk(&self.keys().dead.clone(), 0).await?;
            if ids.is_empty() {
                return Ok(total);
            }
            let n = self.retry_ids(&ids, who, "dead").await?;
            if n == 0 {
                // Everything we saw was retried or purged by someone else meanwhile.
                return Ok(total);
            }
            total += n;
        }
    }

    pub(crate) async fn retry_ids<S: AsRef<str>>(
        &self,
        ids: &[S],
        who: &str,
        mode: &str,
    ) -> Result<u64> {
        if let Some(parts) = self.parts() {
            let mut n = 0;
            for (p, idx) in self.group_by_part(ids) {
                let chunk: Vec<&str> = idx.iter().map(|&i| ids[i].as_ref()).collect();
                n += (parts[p].retry_ids_one(&chunk, who, mode)).await?;
            }
            return Ok(n);
        }
        self.retry_ids_one(ids, who, mode).await
    }

    /// [`Queue::retry_ids`] on this partition alone (or the whole queue of one partition).
    async fn retry_ids_one<S: AsRef<str>>(&self, ids: &[S], who: &str, mode: &str) -> Result<u64> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.retry);
        inv.key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.retry)
            .key(&k.dead)
            .key(&k.events)
            .arg(who)
            .arg(mode);
        for id in ids {
            let id = id.as_ref();
            inv.key(k.task(id)).key(k.hist(id)).arg(id);
        }
        inv.key(&k.wakeups);
        count(int(&self.run(&inv).await?)?)
    }

    /// Removes a live task (due, leased or dead) for good. Ok(false) if there is none.
    pub async fn cancel(&self, id: &str, who: &str) -> Result<bool> {
        if let Some(p) = self.part_for(id) {
            return (p.cancel_one(id, who)).await;
        }
        self.cancel_one(id, who).await
    }

    /// [`Queue::cancel`] on this partition alone (or the whole queue of one partition).
    async fn cancel_one(&self, id: &str, who: &str) -> Result<bool> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.cancel);
        inv.key(k.task(id))
            .key(k.hist(id))
            .key(k.partial(id))
            .key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.lease)
            .key(&k.retry)
            .key(&k.dead)
            .key(&k.events)
            .key(&k.fair)
            .key(&k.fairc)
            .arg(id)
            .arg(who)
            .arg(clamp_ms(self.config().result_ttl_ms));
        Ok(int(&self.run(&inv).await?)? == 1)
    }

    /// Opens the upstream's circuit breaker by hand for `for_ms` (then a probe goes, as after
    /// an automatic opening): claims take nothing, leases in flight carry on.
    pub async fn open_breaker(&self, who: &str, for_ms: u64) -> Result<()> {
        self.breaker_action("open", who, for_ms).await.map(|_| ())
    }

    /// Closes the breaker at once and wakes a worker per ready task. Ok(false): it was closed.
    pub async fn close_breaker(&self, who: &str) -> Result<bool> {
        self.breaker_action("close", who, 1).await
    }

    async fn breaker_action(&self, mode: &str, who: &str, for_ms: u64) -> Result<bool> {
        if let Some(parts) = self.parts() {
            // Every partition's claims read their own breaker (partition.rs).
            let changed = Queue::fan(parts, |p| async move {
                p.breaker_action_one(mode, who, for_ms).await
            })
            .await?;
            return Ok(changed.into_iter().any(|c| c));
        }
        self.breaker_action_one(mode, who, for_ms).await
    }

    /// [`Queue::breaker_action`] on this partition alone (or the whole queue of one partition).
    pub(crate) async fn breaker_action_one(
        &self,
        mode: &str,
        who: &str,
        for_ms: u64,
    ) -> Result<bool> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.breaker);
        inv.key(&k.breaker)
            .key(&k.events)
            .key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.wakeups)
            .arg(mode)
            .arg(who)
            .arg(clamp_ms(for_ms).max(1));
        Ok(int(&self.run(&inv).await?)? == 1)
    }

    /// Stops claims (they return nothing) until resume. Leases in flight carry on.
    pub async fn pause(&self, who: &str) -> Result<()> {
        self.set_paused("pause", who).await
    }

    /// Lets claims run again and wakes idle workers.
    pub async fn resume(&self, who: &str) -> Result<()> {
        self.set_paused("resume", who).await
    }

    async fn set_paused(&self, mode: &str, who: &str) -> Result<()> {
        if let Some(parts) = self.parts() {
            // Every partition's claims read their own flag (partition.rs); an error leaves
            // some partitions switched and is returned, so the operator asks again.
            Queue::fan(parts, |p| async move { p.set_paused_one(mode, who).await }).await?;
            return Ok(());
        }
        self.set_paused_one(mode, who).await
    }

    /// [`Queue::set_paused`] on this partition alone (or the whole queue of one partition).
    async fn set_paused_one(&self, mode: &str, who: &str) -> Result<()> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.pause);
        inv.key(&k.paused)
            .key(&k.events)
            .key(&k.ready)
            .key(&k.ready_bg)
            .key(&k.due)
            .key(&k.wakeups)
            .arg(mode)
            .arg(who);
        self.run(&inv).await?;
        Ok(())
    }

    pub async fn is_paused(&self) -> Result<bool> {
        if let Some(parts) = self.parts() {
            return (parts[0].is_paused_one()).await;
        }
        self.is_paused_one().await
    }

    /// [`Queue::is_paused`] on this partition alone (or the whole queue of one partition).
    async fn is_paused_one(&self) -> Result<bool> {
        let mut c = self.conn.clone();
        Ok(c.exists(&self.keys().paused).await?)
    }

    /// Removes everything of one kind, chunk by chunk; returns how many were removed.
    pub async fn purge(&self, target: PurgeTarget, who: &str) -> Result<u64> {
        if let Some(parts) = self.parts() {
            let n = Queue::fan(parts, |p| async move { p.purge_one(target, who).await }).await?;
            return Ok(n.into_iter().sum());
        }
        self.purge_one(target, who).await
    }

    /// [`Queue::purge`] on this partition alone (or the whole queue of one partition).
    async fn purge_one(&self, target: PurgeTarget, who: &str) -> Result<u64> {
        let k = self.keys().clone();
        let (name, sources): (&str, Vec<&String>) = match target {
            PurgeTarget::Dead => ("dead", vec![&k.dead]),
            PurgeTarget::Results => ("results", vec![&k.results]),
            PurgeTarget::Queued => ("queued", vec![&k.due]),
            // Histories belong to ids in any of these sets (ready-list tasks have none until
            // something notable happens to them, and then they are in a set or a list's
            // history is removed with them); cancelled tasks' histories expire on their own.
            PurgeTarget::History => ("history", vec![&k.due, &k.lease, &k.dead, &k.results]),
        };
        let mut total = 0;
        if target == PurgeTarget::Queued {
            // Ready lists first, chunk by chunk from their heads (the script reads the ids).
            for (list, kind) in [(&k.ready, "list"), (&k.ready_bg, "list"), (&k.fair, "fair")] {
                loop {
                    let mut inv = self.invocation(&SCRIPTS.purge_ready);
                    inv.key(list).key(&k.events).arg(who).arg(CHUNK).arg(kind);
                    let n = count(int(&self.run(&inv).await?)?)?;
                    total += n;
                    let mut c = self.conn.clone();
                    let left: u64 = if kind == "list" {
                        c.llen(list).await?
                    } else {
                        c.zcard(list).await?
                    };
                    if left == 0 {
                        break;
                    }
                }
            }
        }
        for src in sources {
            // Deleting dead/results/queued removes the ids from the set being walked, so
            // those restart at 0; a history purge leaves the sets alone and walks forward.
            let mut offset = 0;
            loop {
                let ids = self.zrange_chunk(src, offset).await?;
                if ids.is_empty() {
                    break;
                }
                let n = self.purge_chunk(name, &ids, who).await?;
                total += n;
                if target == PurgeTarget::History {
                    offset += ids.len();
                } else if n == 0 {
                    break;
                }
            }
        }
        Ok(total)
    }

    pub(crate) async fn purge_chunk<S: AsRef<str>>(
        &self,
        target: &str,
        ids: &[S],
        who: &str,
    ) -> Result<u64> {
        if let Some(parts) = self.parts() {
            let mut n = 0;
            for (p, idx) in self.group_by_part(ids) {
                let chunk: Vec<&str> = idx.iter().map(|&i| ids[i].as_ref()).collect();
                n += (parts[p].purge_chunk_one(target, &chunk, who)).await?;
            }
            return Ok(n);
        }
        self.purge_chunk_one(target, ids, who).await
    }

    /// [`Queue::purge_chunk`] on this partition alone (or the whole queue of one partition).
    async fn purge_chunk_one<S: AsRef<str>>(
        &self,
        target: &str,
        ids: &[S],
        who: &str,
    ) -> Result<u64> {
        let k = self.keys();
        let mut inv = self.invocation(&SCRIPTS.purge);
        inv.key(&k.due)
            .key(&k.retry)
            .key(&k.dead)
            .key(&k.results)
            .key(&k.events)
            .arg(target)
            .arg(who);
        for id in ids {
            let id = id.as_ref();
            inv.key(k.task(id))
                .key(k.hist(id))
                .key(k.result(id))
                .key(k.partial(id))
                .arg(id);
        }
        count(int(&self.run(&inv).await?)?)
    }

    /// Up to CHUNK members of a zset from `offset` (plain read; the acting script re-checks).
    pub(crate) async fn zrange_chunk(&self, key: &str, offset: usize) -> Result<Vec<String>> {
        let mut c = self.conn.clone();
        let stop = (offset + CHUNK - 1) as isize;
        let v: redis::Value = c.zrange(key, offset as isize, stop).await?;
        array(v)?.iter().map(string).collect()
    }
}

/// What [`Queue::migrate`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Migrated {
    /// Task records rewritten from the first layout.
    pub records: u64,
    /// Results rewritten from hashes into strings.
    pub results: u64,
    /// Task and result keys looked at.
    pub scanned: u64,
}

impl Queue {
    /// Rewrites a queue written by the first layout (long field names, results as hashes) into
    /// the lean one, task by task (migrate.lua, atomic and idempotent per task), while workers
    /// run: a task already lean is left alone. Walks the keyspace with SCAN; on a Redis Cluster
    /// run it against the queue's node. `repoll admin migrate` calls it.
    ///
    /// A partitioned queue has nothing to migrate (partitions came after the lean layout).
    pub async fn migrate(&self) -> Result<Migrated> {
        if self.parts().is_some() {
            return Ok(Migrated::default());
        }
        let k = self.keys();
        let name: String = self
            .config()
            .name
            .chars()
            .flat_map(|c| match c {
                '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let pattern = format!("{{{name}}}:[tr]:*");
        let mut out = Migrated::default();
        let mut seen = std::collections::HashSet::new();
        let mut c = self.conn.clone();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut c)
                .await?;
            for key in keys {
                out.scanned += 1;
                let Some(id) = key.rsplit(':').next() else {
                    continue;
                };
                if !TaskId::is_valid(id) || !seen.insert(id.to_string()) {
                    continue;
                }
                let mut inv = self.invocation(&SCRIPTS.migrate);
                inv.key(k.task(id))
                    .key(k.result(id))
                    .key(k.partial(id))
                    .arg(id);
                let r = array(self.run(&inv).await?)?;
                if r.first().map(string).transpose()?.as_deref() == Some("migrated") {
                    out.records += 1;
                }
                if r.get(1).map(string).transpose()?.as_deref() == Some("migrated") {
                    out.results += 1;
                }
            }
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }
}

fn count(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| corrupt("negative count"))
}
