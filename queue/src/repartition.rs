//! Changing a queue's partition count ([`Queue::repartition`], `repoll admin repartition`).
//!
//! A task's partition is its id's hash mod P, so a new P puts most ids in another partition.
//! Moving live tasks while workers hold leases on them cannot be one atomic step (a script sees
//! one slot), so this moves a *drained* queue that nobody runs: no task ready, waiting, leased
//! or dead, and no repoll process heartbeating — web processes included (`registry.rs`): one
//! left running would keep accepting queries into the old layout, where the new one never
//! looks. What a drained queue still holds is worth keeping and is moved: the
//! stored results (still served to callers without asking the upstream) with their remaining
//! time to live, the finished tasks' histories, and the throughput counters behind the charts
//! (added into the new partition 0). The old partitions' event streams are dropped.
//!
//! Resumable and never silent: the target count is recorded first (`moving_to` in the meta
//! hash, which makes every process refuse to start), then copied into the meta hash of every
//! partition of both layouts, where each enqueue reads it in its own slot (enqueue.lua), so a
//! process still running the old layout (one that never registered, or started in between)
//! has its enqueues refused from then on instead of accepted and lost; its heartbeat tells it
//! too, and it stops claiming ([`Queue::layout_changed`]). The queue is then checked again
//! (nothing can join the old layout any more), and a refusal at that point gives the old
//! layout back. Every copy is a RESTORE REPLACE of the same bytes (a second run copies again,
//! harmlessly), the old keys are deleted only after every copy (their meta hashes stay: they
//! keep refusing the old layout), and the new count is recorded last.

use redis::AsyncCommands;

use crate::error::{config, Result};
use crate::keys::Keys;
use crate::model::QueueConfig;
use crate::{Queue, RedisConn};

/// What [`Queue::repartition`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Repartitioned {
    /// The partition count the queue had.
    pub from: u16,
    /// The partition count it has now.
    pub to: u16,
    /// Stored results in the new layout (moved, or already where the new count puts them).
    pub results: u64,
    /// Of those, the ones moved to another partition, and the histories moved with them.
    pub moved: u64,
    /// Task histories moved with the moved results.
    pub histories: u64,
}

/// Ids read from the results index per round.
const CHUNK: isize = 500;

impl Queue {
    /// Moves the drained queue `cfg.name` to `to` partitions (see the module doc). Refuses,
    /// writing nothing, while any task is live or any repoll process (web or worker)
    /// heartbeats.
    pub async fn repartition(
        conn: impl Into<RedisConn>,
        cfg: QueueConfig,
        to: u16,
    ) -> Result<Repartitioned> {
        let conn = conn.into();
        if !(1..=crate::partition::MAX_PARTITIONS).contains(&to) {
            return Err(config(format!(
                "repartition: the count must be 1 to {}",
                crate::partition::MAX_PARTITIONS
            )));
        }
        let layout = |partitions| {
            let cfg = QueueConfig {
                partitions,
                ..cfg.clone()
            };
            Queue::layout(conn.clone(), cfg)
        };
        let meta = Keys::new(&cfg.name).meta();
        let mut c = conn.clone();
        let (have, moving): (Option<u16>, Option<u16>) = redis::pipe()
            .hget(&meta, "partitions")
            .hget(&meta, "moving_to")
            .query_async(&mut c)
            .await?;
        let from = have.unwrap_or(1);
        if let Some(m) = moving.filter(|m| *m != to) {
            return Err(config(format!(
                "repartition: a move to {m} partitions is unfinished; run it with --to {m} first"
            )));
        }
        let (old, new) = (layout(from), layout(to));
        let mut out = Repartitioned {
            from,
            to,
            ..Repartitioned::default()
        };
        if from == to && moving.is_none() {
            return Ok(out);
        }
        let starts = moving.is_none();
        if starts {
            old.refuse_unless_idle().await?;
            let _: () = c.hset(&meta, "moving_to", to).await?;
        }
        // From here on no enqueue of the old layout is accepted (each is refused in its own
        // slot), so what the check below sees stays true.
        let marked = mark_slots(&mut c, &cfg.name, &old, &new, to).await?;
        if starts {
            // A process that was not registered (or registered since), or a query accepted
            // between the first check and the marks: give the old layout back and refuse.
            if let Err(e) = old.refuse_unless_idle().await {
                unmark_slots(&mut c, marked).await?;
                let _: () = c.hdel(&meta, "moving_to").await?;
                return Err(e);
            }
        }
        // Every partition's index as it is before anything moves (a moved id joins the index
        // of its new partition, which may be an old partition's too).
        let mut indexes = Vec::new();
        for part in old.slots() {
            indexes.push(results_index(&mut c, part.keys()).await?);
        }
        let new_tags: Vec<&str> = new.slots().iter().map(|q| q.keys().tag()).collect();
        for (part, rows) in old.slots().iter().zip(indexes) {
            let k = part.keys();
            move_results(&mut c, k, &new, rows, &mut out).await?;
            if !new_tags.contains(&k.tag()) {
                // The charts' counters: summed into the new partition 0.
                move_counters(&mut c, k, new.slots()[0].keys()).await?;
            }
        }
        // Every result moved: the old partitions' queue-wide keys go, unless the new layout
        // has the same tag (then they are its own).
        for part in old.slots() {
            if !new_tags.contains(&part.keys().tag()) {
                drop_slot_keys(&mut c, part.keys()).await?;
            }
        }
        let _: () = redis::pipe()
            .hset(&meta, "partitions", to)
            .hdel(&meta, "moving_to")
            .query_async(&mut c)
            .await?;
        Ok(out)
    }
}

impl Queue {
    /// Errors (writing nothing) while any repoll process of the queue heartbeats (a web
    /// process or a worker: either would write into the old layout) or any task of this
    /// layout is live: only a drained queue that nobody runs can move.
    async fn refuse_unless_idle(&self) -> Result<()> {
        let webs = self.web_processes().await?;
        let workers = self.workers().await?;
        if !webs.is_empty() || !workers.is_empty() {
            let named: Vec<String> = webs
                .iter()
                .map(|p| format!("web process {} (pid {} on {})", p.id, p.pid, p.host))
                .chain(
                    workers
                        .iter()
                        .map(|w| format!("worker {} (pid {} on {})", w.id, w.pid, w.host)),
                )
                .collect();
            let n = named.len();
            let mut list = named.into_iter().take(5).collect::<Vec<_>>().join(", ");
            if n > 5 {
                list.push_str(&format!(" and {} more", n - 5));
            }
            return Err(config(format!(
                "repartition: {n} repoll process{} of queue {:?} {} running: {list}. Stop \
                 each first (SIGTERM or Ctrl-C: a clean stop leaves the registry at once; a \
                 killed process drops out {} heartbeat periods after its last heartbeat, 15 s \
                 with the default REPOLL_HEARTBEAT_MS), then run this again",
                if n == 1 { "" } else { "es" },
                self.config().name,
                if n == 1 { "is" } else { "are" },
                crate::registry::REGISTRY_TTL_PERIODS,
            )));
        }
        let s = self.stats().await?;
        let live = s.ready + s.waiting + s.retrying + s.leased + s.dead;
        if live > 0 {
            return Err(config(format!(
                "repartition: {live} tasks are live ({} ready, {} waiting, {} leased, {} dead); \
             drain the queue first (pause it, let the workers finish, retry or purge the \
             dead ones)",
                s.ready,
                s.waiting + s.retrying,
                s.leased,
                s.dead
            )));
        }
        Ok(())
    }
}

/// Records `to` as the partition count in the meta hash of every slot of both layouts (the
/// control slot `{name}` aside: its `partitions` is the queue's record, set last, and its
/// `moving_to` speaks meanwhile), so an enqueue of a process still running the old layout is
/// refused in its own slot (enqueue.lua). Answers each meta key with the count it held, for
/// [`unmark_slots`].
async fn mark_slots(
    c: &mut RedisConn,
    name: &str,
    old: &Queue,
    new: &Queue,
    to: u16,
) -> Result<Vec<(String, Option<String>)>> {
    let control = Keys::new(name).meta();
    let mut marked: Vec<(String, Option<String>)> = Vec::new();
    for part in old.slots().iter().chain(new.slots()) {
        let meta = part.keys().meta();
        if meta == control || marked.iter().any(|(k, _)| *k == meta) {
            continue;
        }
        let before: Option<String> = c.hget(&meta, "partitions").await?;
        let _: () = c.hset(&meta, "partitions", to).await?;
        marked.push((meta, before));
    }
    Ok(marked)
}

/// Gives each meta key [`mark_slots`] wrote the count it held before (none: no field).
async fn unmark_slots(c: &mut RedisConn, marked: Vec<(String, Option<String>)>) -> Result<()> {
    for (meta, before) in marked {
        let _: () = match before {
            Some(n) => c.hset(&meta, "partitions", n).await?,
            None => c.hdel(&meta, "partitions").await?,
        };
    }
    Ok(())
}

/// A results index (id, completion time), read in chunks of [`CHUNK`].
async fn results_index(c: &mut RedisConn, k: &Keys) -> Result<Vec<(String, f64)>> {
    let mut rows: Vec<(String, f64)> = Vec::new();
    loop {
        let start = rows.len() as isize;
        let chunk: Vec<(String, f64)> = c
            .zrange_withscores(&k.results, start, start + CHUNK - 1)
            .await?;
        if chunk.is_empty() {
            return Ok(rows);
        }
        rows.extend(chunk);
    }
}

/// Moves the results (and their histories) of `rows`, the results index of the slot of keys
/// `k`, to their slots in `new`, counting them in `out`. Copy, then delete: a run stopped
/// between the two copies again next time.
async fn move_results(
    c: &mut RedisConn,
    k: &Keys,
    new: &Queue,
    rows: Vec<(String, f64)>,
    out: &mut Repartitioned,
) -> Result<()> {
    for (id, score) in rows {
        out.results += 1;
        let dest = new.slot_of(&id);
        let dk = dest.keys();
        if dk.tag() == k.tag() {
            continue;
        }
        // Copy, then delete: a run stopped between the two copies again next time.
        for (from_key, to_key, is_result) in [
            (k.result(&id), dk.result(&id), true),
            (k.hist(&id), dk.hist(&id), false),
        ] {
            let (dump, ttl): (Option<Vec<u8>>, i64) = redis::pipe()
                .cmd("DUMP")
                .arg(&from_key)
                .cmd("PTTL")
                .arg(&from_key)
                .query_async(&mut *c)
                .await?;
            let Some(dump) = dump else { continue };
            let _: () = redis::cmd("RESTORE")
                .arg(&to_key)
                .arg(ttl.max(0))
                .arg(dump)
                .arg("REPLACE")
                .query_async(&mut *c)
                .await?;
            if is_result {
                out.moved += 1;
            } else {
                out.histories += 1;
            }
        }
        let _: () = c.zadd(&dk.results, &id, score).await?;
        let _: () = redis::pipe()
            .del(k.result(&id))
            .ignore()
            .del(k.hist(&id))
            .ignore()
            .zrem(&k.results, &id)
            .ignore()
            .query_async(&mut *c)
            .await?;
    }
    Ok(())
}

/// Adds the throughput counters of the slot of keys `k` into the slot of keys `to` (a hash's
/// fields add up; an index is a set of names) and deletes them.
async fn move_counters(c: &mut RedisConn, k: &Keys, fk: &Keys) -> Result<()> {
    for (hash, index, to_hash, to_index) in [
        (&k.tp, &k.tpmin, &fk.tp, &fk.tpmin),
        (&k.tphour, &k.tphourix, &fk.tphour, &fk.tphourix),
    ] {
        let fields: Vec<(String, i64)> = c.hgetall(hash).await?;
        for chunk in fields.chunks(500) {
            let mut p = redis::pipe();
            for (f, v) in chunk {
                p.hincr(to_hash, f, *v).ignore();
            }
            p.query_async::<()>(&mut *c).await?;
        }
        let members: Vec<(String, f64)> = c.zrange_withscores(index, 0, -1).await?;
        for chunk in members.chunks(500) {
            let items: Vec<(f64, &str)> = chunk.iter().map(|(m, s)| (*s, m.as_str())).collect();
            let _: () = c.zadd_multiple(to_index, &items).await?;
        }
        // At once, so a run stopped here does not add them twice when run again.
        let _: () = redis::pipe()
            .del(hash)
            .ignore()
            .del(index)
            .ignore()
            .query_async(&mut *c)
            .await?;
    }
    Ok(())
}

/// Deletes the queue-wide keys of an old slot no longer in the layout.
async fn drop_slot_keys(c: &mut RedisConn, k: &Keys) -> Result<()> {
    for key in [
        &k.ready,
        &k.ready_bg,
        &k.share,
        &k.due,
        &k.lease,
        &k.dead,
        &k.retry,
        &k.events,
        &k.paused,
        &k.token,
        &k.tp,
        &k.tpmin,
        &k.tphour,
        &k.tphourix,
        &k.breaker,
        &k.wakeups,
        &k.fair,
        &k.fairt,
        &k.fairv,
        &k.fairc,
        &k.fairr,
        &k.results,
    ] {
        let _: () = c.del(key).await?;
    }
    Ok(())
}
