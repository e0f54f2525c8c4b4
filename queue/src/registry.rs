//! Who is running: every repoll process of a queue heartbeats into a registry in the control
//! slot `{name}`, so an operation that must not run beside a live process (a repartition:
//! `repartition.rs`) can see them all, and the dashboard can list the workers.
//!
//! Two registries, one per kind, with one implementation (the `heartbeat` function, the same
//! time to live, the same listing): workers (`{name}:workers` / `{name}:w:<id>`, what the
//! dashboard's Workers panel shows, with their slots and counters) and web processes
//! (`{name}:webs` / `{name}:web:<id>`): a `repoll serve` accepts queries even with no worker
//! of its own (`--workers 0`), and a repartition under it would lose what it accepts. An entry
//! is a hash that expires [`REGISTRY_TTL_PERIODS`] heartbeat periods after the last heartbeat
//! (a killed process drops out by itself), indexed by a zset (id -> last seen) so listing needs
//! no key scan; a clean stop removes its entry at once.
//!
//! Each heartbeat also reads the queue's layout (its meta hash, same slot) and records on the
//! handle whether it is still the handle's ([`Queue::layout_changed`]): a process learns of a
//! repartition under it within one heartbeat, at no extra round trip.
//!
//! An admin's command to a worker (quiet, stop: [`Queue::command_worker`]) is a field of its
//! entry, answered by its next heartbeat: it reaches the process wherever it runs, and a
//! missed message cannot lose it (there is none to miss).

use redis::Value;

use crate::decode::{self, array, int, opt_string, Fields};
use crate::error::{corrupt, Result};
use crate::keys::Keys;
use crate::model::{WorkerCommand, WorkerInfo, WorkerMode};
use crate::queue::clamp_ms;
use crate::scripts::SCRIPTS;
use crate::Queue;

/// A registry entry lives this many heartbeat periods after its last heartbeat.
pub const REGISTRY_TTL_PERIODS: u64 = 3;

/// The time to live of the registry entry of a process that heartbeats every `every_ms`.
pub fn registry_ttl_ms(every_ms: u64) -> u64 {
    every_ms.saturating_mul(REGISTRY_TTL_PERIODS)
}

/// A web process (a `repoll serve`) as its registry entry shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebProcess {
    /// Its id (`host-pid-random`).
    pub id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id there.
    pub pid: u32,
    /// When it started (ms).
    pub started_ms: i64,
    /// Its last heartbeat (Redis time, ms; the value passed in is ignored).
    pub last_seen_ms: i64,
}

/// The two registries.
#[derive(Clone, Copy)]
enum Kind {
    Worker,
    Web,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Worker => "worker",
            Kind::Web => "web",
        }
    }

    /// The index zset of this kind's registry.
    fn index(self, k: &Keys) -> &str {
        match self {
            Kind::Worker => &k.workers,
            Kind::Web => &k.webs,
        }
    }

    /// The heartbeat hash of entry `id`.
    fn entry(self, k: &Keys, id: &str) -> String {
        match self {
            Kind::Worker => k.worker(id),
            Kind::Web => k.web(id),
        }
    }
}

/// What an admin's command to a worker came to ([`Queue::command_worker`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandSent {
    /// Left in its entry: its next heartbeat reads it.
    Sent,
    /// No live worker with this id in this queue's registry (stopped, or its entry expired).
    NoSuchWorker,
    /// A quiet for a worker already told to stop (a stop is final): nothing written.
    AlreadyStopping,
}

/// What one heartbeat says besides the fields: who, and (for a worker) its counters, its
/// mode and its memory.
struct Beat<'a> {
    kind: Kind,
    id: &'a str,
    host: &'a str,
    pid: u32,
    started_ms: i64,
    worker: Option<WorkerBeat>,
}

/// A worker's own part of its heartbeat.
struct WorkerBeat {
    counters: [u64; 3],
    mode: WorkerMode,
    rss_bytes: Option<u64>,
}

impl Queue {
    /// Records a worker as alive for `ttl_ms` ([`registry_ttl_ms`] of its period), with its
    /// counters, its mode and its memory; `last_seen_ms` is set from Redis time (`command` is
    /// not written: only an admin sends one). Answers the command an admin left for it, if
    /// any (it stays in the entry: the worker acts on it once).
    pub async fn heartbeat(&self, w: &WorkerInfo, ttl_ms: u64) -> Result<Option<WorkerCommand>> {
        self.beat(
            Beat {
                kind: Kind::Worker,
                id: &w.id,
                host: &w.host,
                pid: w.pid,
                started_ms: w.started_ms,
                worker: Some(WorkerBeat {
                    counters: [u64::from(w.in_flight), w.completed, w.dead],
                    mode: w.mode,
                    rss_bytes: w.rss_bytes,
                }),
            },
            ttl_ms,
        )
        .await
    }

    /// Tells the worker `worker_id` to go quiet or to stop (worker_command.lua): left in its
    /// registry entry, read on its next heartbeat. Only a live entry is written.
    pub async fn command_worker(
        &self,
        worker_id: &str,
        command: WorkerCommand,
    ) -> Result<CommandSent> {
        let control = self.control();
        let mut inv = control.invocation(&SCRIPTS.worker_command);
        inv.for_task(worker_id).arg(worker_id).arg(command.as_str());
        match int(&control.run(&inv).await?)? {
            1 => Ok(CommandSent::Sent),
            0 => Ok(CommandSent::NoSuchWorker),
            2 => Ok(CommandSent::AlreadyStopping),
            n => Err(corrupt(format!("worker_command: unexpected answer {n}"))),
        }
    }

    /// Records a web process as alive for `ttl_ms` ([`registry_ttl_ms`] of its period).
    pub async fn heartbeat_web(&self, p: &WebProcess, ttl_ms: u64) -> Result<()> {
        self.beat(
            Beat {
                kind: Kind::Web,
                id: &p.id,
                host: &p.host,
                pid: p.pid,
                started_ms: p.started_ms,
                worker: None,
            },
            ttl_ms,
        )
        .await
        .map(|_| ())
    }

    /// One heartbeat (heartbeat.lua), and what it read of the layout noted on the handle;
    /// the worker's pending command.
    async fn beat(&self, b: Beat<'_>, ttl_ms: u64) -> Result<Option<WorkerCommand>> {
        let control = self.control();
        let k = control.keys();
        let mut inv = control.invocation(&SCRIPTS.heartbeat);
        inv.given("index", b.kind.index(k))
            .given("entry", b.kind.entry(k, b.id))
            .arg(b.kind.name())
            .arg(b.id)
            .arg(b.host)
            .arg(b.pid)
            .arg(b.started_ms)
            .arg(clamp_ms(ttl_ms).max(1));
        if let Some(w) = &b.worker {
            for c in w.counters {
                inv.arg(c);
            }
            inv.arg(w.mode.as_str())
                .arg(w.rss_bytes.map(|n| n.to_string()).unwrap_or_default());
        }
        let reply = array(control.run(&inv).await?)?;
        let [now, partitions, moving_to, command] =
            <[Value; 4]>::try_from(reply).map_err(|_| corrupt("heartbeat: expected 4 values"))?;
        int(&now)?;
        let count = |v: &Value| -> Result<Option<u16>> {
            opt_string(v)?
                .map(|s| {
                    s.parse::<u16>()
                        .map_err(|_| corrupt(format!("heartbeat: partition count {s:?}")))
                })
                .transpose()
        };
        self.note_layout(count(&partitions)?, count(&moving_to)?);
        opt_string(&command)?
            .map(|c| {
                WorkerCommand::parse(&c)
                    .ok_or_else(|| corrupt(format!("heartbeat: unknown command {c:?}")))
            })
            .transpose()
    }

    /// Forgets a worker at once (clean shutdown) instead of waiting for its heartbeat TTL,
    /// and tells the dashboard (`worker_left`).
    pub async fn remove_worker(&self, worker_id: &str) -> Result<()> {
        let msg = serde_json::json!({ "kind": "worker_left", "worker": worker_id }).to_string();
        self.remove(Kind::Worker, worker_id, Some(msg)).await
    }

    /// Forgets a web process at once (clean shutdown) instead of waiting for its TTL.
    pub async fn remove_web_process(&self, id: &str) -> Result<()> {
        self.remove(Kind::Web, id, None).await
    }

    async fn remove(&self, kind: Kind, id: &str, news: Option<String>) -> Result<()> {
        let k = self.keys();
        let mut c = self.conn.clone();
        // Not MULTI/EXEC (a cluster connection has no transactions); nothing needs it: a
        // half-done removal leaves an index entry that the listing drops once the hash is gone.
        let mut p = redis::pipe();
        p.del(kind.entry(k, id)).zrem(kind.index(k), id);
        if let Some(msg) = news {
            p.publish(self.channels().dashboard, msg);
        }
        p.query_async::<()>(&mut c).await?;
        Ok(())
    }

    /// Workers with a live heartbeat, most recently seen first. Entries whose heartbeat hash
    /// expired are dropped from the index on the way.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let rows = self.registry(Kind::Worker).await?;
        rows.iter().map(decode::worker).collect()
    }

    /// Web processes with a live heartbeat, most recently seen first (as
    /// [`Queue::workers`]).
    pub async fn web_processes(&self) -> Result<Vec<WebProcess>> {
        let rows = self.registry(Kind::Web).await?;
        rows.iter().map(decode::web_process).collect()
    }

    /// The live entries of one registry (at most 1,000), most recently seen first.
    async fn registry(&self, kind: Kind) -> Result<Vec<Fields>> {
        let k = self.keys();
        let index = kind.index(k);
        let mut c = self.conn.clone();
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(index)
            .arg(0)
            .arg(999)
            .query_async(&mut c)
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.hgetall(kind.entry(k, id));
        }
        let rows: Vec<Value> = pipe.query_async(&mut c).await?;
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (id, row) in ids.iter().zip(rows) {
            match decode::maybe_fields(row)? {
                Some(f) => out.push(f),
                None => gone.push(id.clone()),
            }
        }
        if !gone.is_empty() {
            redis::cmd("ZREM")
                .arg(index)
                .arg(&gone)
                .query_async::<()>(&mut c)
                .await?;
        }
        Ok(out)
    }
}
