//! Admin operations. Each records who did it in the task history and the global event
//! stream. Bulk ones (retry_all_dead, purge) work in chunks of [`CHUNK`] ids per script call,
//! looping from Rust, so Redis is never blocked for long whatever the queue size.

use crate::decode::{array, int, string};
use crate::error::{corrupt, Result};
use crate::model::{PurgeTarget, TaskId};
use crate::queue::{clamp_ms, Queue};
use crate::scripts::SCRIPTS;
use crate::slot::Slot;
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
        let n = self
            .fan(|s| async move { s.retry_all_dead(who).await })
            .await?;
        Ok(n.into_iter().sum())
    }

    /// Retries `ids` (mode "dead": dead ones only; "any": dead or waiting), each in its slot;
    /// returns how many changed.
    pub(crate) async fn retry_ids<S: AsRef<str>>(
        &self,
        ids: &[S],
        who: &str,
        mode: &str,
    ) -> Result<u64> {
        let ids: Vec<&str> = ids.iter().map(AsRef::as_ref).collect();
        let n = self
            .by_slot(
                &ids,
                |id| *id,
                |s, chunk| async move { s.retry_ids(&chunk, who, mode).await },
            )
            .await?;
        Ok(n.into_iter().map(|(_, n)| n).sum())
    }

    /// Removes a live task (due, leased or dead) for good. Ok(false) if there is none.
    pub async fn cancel(&self, id: &str, who: &str) -> Result<bool> {
        self.slot_of(id).cancel(id, who).await
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

    /// Opens or closes (`mode`) the breaker of every slot; true if any changed.
    async fn breaker_action(&self, mode: &str, who: &str, for_ms: u64) -> Result<bool> {
        // Every slot's claims read their own breaker (partition.rs).
        let changed = self
            .fan(|s| async move { s.breaker_action(mode, who, for_ms).await })
            .await?;
        Ok(changed.into_iter().any(|c| c))
    }

    /// Stops claims (they return nothing) until resume. Leases in flight carry on. False: it
    /// was already paused.
    pub async fn pause(&self, who: &str) -> Result<bool> {
        self.set_paused("pause", who).await
    }

    /// Lets claims run again and wakes idle workers. False: it was not paused.
    pub async fn resume(&self, who: &str) -> Result<bool> {
        self.set_paused("resume", who).await
    }

    /// Pauses or resumes (`mode`) every slot; true if any changed (false: it already was so).
    async fn set_paused(&self, mode: &str, who: &str) -> Result<bool> {
        // Every slot's claims read their own flag (partition.rs); an error leaves some slots
        // switched and is returned, so the operator asks again.
        let changed = self
            .fan(|s| async move { s.set_paused(mode, who).await })
            .await?;
        Ok(changed.into_iter().any(|c| c))
    }

    /// Whether the queue is paused (every slot holds the flag; the first slot's is read).
    pub async fn is_paused(&self) -> Result<bool> {
        self.slots()[0].is_paused().await
    }

    /// Removes everything of one kind, chunk by chunk; returns how many were removed.
    pub async fn purge(&self, target: PurgeTarget, who: &str) -> Result<u64> {
        let n = self
            .fan(|s| async move { s.purge(target, who).await })
            .await?;
        Ok(n.into_iter().sum())
    }

    /// Purges `ids` as `target` says ("dead", "results", "queued", "history"), each in its
    /// slot; returns how many were removed.
    pub(crate) async fn purge_chunk<S: AsRef<str>>(
        &self,
        target: &str,
        ids: &[S],
        who: &str,
    ) -> Result<u64> {
        let ids: Vec<&str> = ids.iter().map(AsRef::as_ref).collect();
        let n = self
            .by_slot(
                &ids,
                |id| *id,
                |s, chunk| async move { s.purge_chunk(target, &chunk, who).await },
            )
            .await?;
        Ok(n.into_iter().map(|(_, n)| n).sum())
    }
}

impl Slot {
    /// [`Queue::retry_all_dead`] in this slot.
    pub(crate) async fn retry_all_dead(&self, who: &str) -> Result<u64> {
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

    /// [`Queue::retry_ids`] of ids of this slot (retry.lua).
    pub(crate) async fn retry_ids<S: AsRef<str>>(
        &self,
        ids: &[S],
        who: &str,
        mode: &str,
    ) -> Result<u64> {
        let mut inv = self.invocation(&SCRIPTS.retry);
        inv.arg(who).arg(mode);
        for id in ids {
            let id = id.as_ref();
            inv.item(id).arg(id);
        }
        count(int(&self.run(&inv).await?)?)
    }

    /// [`Queue::cancel`] in this slot.
    pub(crate) async fn cancel(&self, id: &str, who: &str) -> Result<bool> {
        let mut inv = self.invocation(&SCRIPTS.cancel);
        inv.for_task(id)
            .arg(id)
            .arg(who)
            .arg(clamp_ms(self.config().result_life_ms()));
        Ok(int(&self.run(&inv).await?)? == 1)
    }

    /// [`Queue::breaker_action`] on this slot's breaker (breaker.lua); also the mirror of
    /// another slot's opening (`partition`).
    pub(crate) async fn breaker_action(&self, mode: &str, who: &str, for_ms: u64) -> Result<bool> {
        let mut inv = self.invocation(&SCRIPTS.breaker);
        inv.arg(mode).arg(who).arg(clamp_ms(for_ms).max(1));
        Ok(int(&self.run(&inv).await?)? == 1)
    }

    /// [`Queue::set_paused`] on this slot's flag (pause.lua); whether it changed.
    pub(crate) async fn set_paused(&self, mode: &str, who: &str) -> Result<bool> {
        let mut inv = self.invocation(&SCRIPTS.pause);
        inv.arg(mode).arg(who);
        Ok(int(&self.run(&inv).await?)? == 1)
    }

    /// [`Queue::is_paused`] by this slot's flag.
    pub(crate) async fn is_paused(&self) -> Result<bool> {
        let mut c = self.conn.clone();
        Ok(c.exists(&self.keys().paused).await?)
    }

    /// [`Queue::purge`] of this slot, chunk by chunk.
    pub(crate) async fn purge(&self, target: PurgeTarget, who: &str) -> Result<u64> {
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
                    inv.given("list", list.as_str())
                        .arg(who)
                        .arg(CHUNK)
                        .arg(kind);
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

    /// [`Queue::purge_chunk`] of ids of this slot (purge.lua).
    pub(crate) async fn purge_chunk<S: AsRef<str>>(
        &self,
        target: &str,
        ids: &[S],
        who: &str,
    ) -> Result<u64> {
        let mut inv = self.invocation(&SCRIPTS.purge);
        inv.arg(target).arg(who);
        for id in ids {
            let id = id.as_ref();
            inv.item(id).arg(id);
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
        if self.partitions() > 1 {
            return Ok(Migrated::default());
        }
        let slot = &self.slots()[0];
        let k = slot.keys();
        // Every live-task and result key of the queue's one tag (the name escaped for globbing).
        let pattern = k.task_or_result_pattern("");
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
                let mut inv = slot.invocation(&SCRIPTS.migrate);
                inv.for_task(id).arg(id);
                let r = array(slot.run(&inv).await?)?;
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
