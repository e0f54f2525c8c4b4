//! Test helpers of the queue crate: one private redis-server per test binary (the test kit's,
//! never the shared one on 6379) on a free port with no persistence, which stops when the
//! test process exits. Tests share it and isolate themselves by using a distinct queue name
//! (the `{name}` hash tag prefixes every key).
#![allow(dead_code)]

use queue::{EnqueuePolicy, ListState, Order, PurgeTarget, Queue, QueueConfig, Retry, WorkerInfo};
use std::time::{Duration, Instant};

// Redis-time travel (expire a lease, bring a wait due, end a cool-down): its own file, so the
// server's process tests use the same helpers (`#[path]`) without the rest of this module.
mod clock;
pub use clock::*;

/// A redis-server of the test kit (`port`, `url()`), killed when dropped.
pub use testkit::RedisServer as Server;

/// A private redis-server for one test (stopped when dropped).
pub fn spawn_redis() -> Server {
    Server::start()
}

/// As [`spawn_redis`], with extra `redis-server` arguments (its working directory is a fresh
/// temp dir, so relative file names such as a cluster config land there).
pub fn spawn_redis_with(extra: &str) -> Server {
    Server::start_with(testkit::RedisOptions::default().with_args(extra))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The redis-server shared by every test of this binary.
pub fn server() -> &'static Server {
    testkit::redis::shared()
}

pub fn cfg(name: &str) -> QueueConfig {
    QueueConfig {
        name: name.to_string(),
        ..QueueConfig::default()
    }
}

/// The layouts every behavioural test runs on: an unpartitioned queue (P = 1) and a
/// partitioned one (P = 3), whose tasks, leases and counts spread over three hash tags.
pub const LAYOUTS: [u16; 2] = [1, 3];

/// Runs `body` once per layout of [`LAYOUTS`], each on a queue of its own (`name` for
/// P = 1, `name-p3` for P = 3: a queue's partition count is fixed when it is first connected).
/// `body` gets the queue's config (name and partition count set) to connect with
/// [`queue_with`] or adapt. A failure says which P failed, then fails the test.
pub async fn on_each_layout(name: &str, body: impl AsyncFn(QueueConfig)) {
    for p in LAYOUTS {
        let conf = QueueConfig {
            name: if p == 1 {
                name.to_string()
            } else {
                format!("{name}-p{p}")
            },
            partitions: p,
            ..QueueConfig::default()
        };
        let _says_which = LayoutOnPanic(p);
        body(conf).await;
    }
}

/// Names the layout of a failing body (a panic unwinds through it).
struct LayoutOnPanic(u16);

impl Drop for LayoutOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("^ failed on the queue of P = {} partitions", self.0);
        }
    }
}

/// The Redis key of the task hash of `id`, in the partition that holds it.
pub fn task_key(q: &Queue, id: &str) -> String {
    format!("{}:t:{id}", q.partition_tag(q.partition_of(id)))
}

pub async fn queue(name: &str) -> Queue {
    queue_with(cfg(name)).await
}

pub async fn queue_with(cfg: QueueConfig) -> Queue {
    Queue::connect(&server().url(), cfg).await.expect("connect")
}

/// A raw connection for inspecting keys directly.
pub async fn raw() -> redis::aio::MultiplexedConnection {
    redis::Client::open(server().url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every key (and its type+content digest) of one queue, every partition's included: used to
/// prove "nothing written".
pub async fn snapshot(name: &str) -> Vec<(String, String)> {
    let mut c = raw().await;
    // The queue's own tag and its partitions' (`{name#i}`, `{name#i.k}`).
    let mut keys: Vec<String> = Vec::new();
    for pattern in [format!("{{{name}}}*"), format!("{{{name}#*")] {
        let found: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut c)
            .await
            .unwrap();
        keys.extend(found);
    }
    // The partition count recorded when the queue was first connected (partition.rs) is
    // the connection's write, not an operation's.
    keys.retain(|k| *k != format!("{{{name}}}:meta"));
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let dump: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        out.push((k, format!("{:?} ttl>0:{}", dump, ttl > 0)));
    }
    out
}

/// Claims exactly one task for worker `w` with a lease of `lease` ms (panics otherwise).
pub async fn claim_one(q: &Queue, w: &str, lease: u64) -> queue::Claimed {
    let mut c = q.claim(w, 1, lease).await.unwrap();
    assert_eq!(c.len(), 1, "expected one claim");
    c.remove(0)
}

pub async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Waits until Redis's clock (TIME, the one every script reads) reaches `at_ms`: for time the
/// scenario itself needs to pass, measured on the queue's own clock. Polls, with a hang guard.
pub async fn until_redis_time(q: &Queue, at_ms: i64) {
    let guard = Instant::now() + Duration::from_secs(60);
    loop {
        let now = q.now_ms().await.unwrap();
        if now >= at_ms {
            return;
        }
        assert!(
            Instant::now() < guard,
            "hang guard: Redis time at {now} after 60 s, waiting for {at_ms}"
        );
        sleep_ms(u64::try_from(at_ms - now).unwrap().min(100)).await;
    }
}

/// Runs every public operation of the queue once, each on a state where it acts (scripts,
/// pipelined reads, Pub/Sub publishes), and panics on the first error. Used to prove that a
/// restricted environment (an ACL user limited to the queue's keys, a Redis Cluster node) runs
/// all of them. `q` must have `max_lease_losses = 1`, so the reaper's poison path runs too.
pub async fn exercise_every_operation(q: &Queue) {
    let p = EnqueuePolicy {
        deadline_ms: 60_000,
        max_attempts: 2,
        ..EnqueuePolicy::default()
    };
    let c = exercise_every_path_of_a_task(q, &p).await;
    exercise_pause_and_the_registries(q).await;
    exercise_the_reads(q, &c[0].id).await;
    exercise_the_dashboard_keys(q, &c[0].id).await;
    q.enqueue("acl 0", "p", &p).await.unwrap();
    exercise_fair_shares(q, &p).await;
    for t in [
        PurgeTarget::History,
        PurgeTarget::Dead,
        PurgeTarget::Results,
        PurgeTarget::Queued,
    ] {
        q.purge(t, "a").await.unwrap();
    }
}

/// Six tasks claimed, then each taken down another path of a task's life (complete,
/// reschedule, fail, die, release, lost lease), then retried, cancelled and called back. The
/// claims.
async fn exercise_every_path_of_a_task(q: &Queue, p: &EnqueuePolicy) -> Vec<queue::Claimed> {
    for i in 0..6 {
        q.enqueue(&format!("acl {i}"), "p", p).await.unwrap();
    }
    // Long leases: no call below may find its lease run out on a slow machine; the one the
    // reaper must take (c[5]) is expired by construction.
    let c = q.claim("w", 6, 600_000).await.unwrap();
    assert_eq!(c.len(), 6);
    q.renew(&c[0].id, c[0].token, 10_000).await.unwrap();
    q.complete(&c[0].id, c[0].token, "r", 1).await.unwrap();
    q.reschedule(&c[1].id, c[1].token, 60_000, Some("x"), 1)
        .await
        .unwrap();
    q.fail(&c[2].id, c[2].token, "e", Retry::After(0), 1)
        .await
        .unwrap();
    q.fail(&c[3].id, c[3].token, "e", Retry::Dead, 1)
        .await
        .unwrap();
    q.release(&c[4].id, Some(c[4].token), "w").await.unwrap();
    expire_lease(q, &c[5].id).await;
    let r = q.reap(10).await.unwrap();
    assert_eq!(r.dead, vec![c[5].id.clone()], "poison after one loss");
    q.retry(&c[1].id, "a").await.unwrap();
    assert!(q.retry_all_dead("a").await.unwrap() >= 1);
    q.cancel(&c[2].id, "a").await.unwrap();
    q.release(&c[4].id, None, "a").await.unwrap();
    assert!(q
        .complete_by_callback(&c[4].id, c[4].created_ms, 0, "cb")
        .await
        .unwrap());
    // c[3] died and was retried back to due: the upstream's "failed" by callback ends it.
    assert!(q
        .fail_by_callback(&c[3].id, c[3].created_ms, 0, "cb failed")
        .await
        .unwrap());
    c
}

/// Pause and resume, the upstream permit, and a worker's and a web process's registrations.
async fn exercise_pause_and_the_registries(q: &Queue) {
    q.pause("a").await.unwrap();
    q.resume("a").await.unwrap();
    q.is_paused().await.unwrap();
    let w = WorkerInfo {
        id: "w".into(),
        host: "h".into(),
        pid: 1,
        started_ms: 0,
        in_flight: 0,
        completed: 0,
        dead: 0,
        last_seen_ms: 0,
        rss_bytes: None,
        mode: Default::default(),
        command: None,
    };
    q.upstream_permit(10, 2).await.unwrap();
    q.heartbeat(&w, 1000).await.unwrap();
    q.command_worker("w", queue::WorkerCommand::Quiet)
        .await
        .unwrap();
    q.workers().await.unwrap();
    q.remove_worker("w").await.unwrap();
    let web = queue::WebProcess {
        id: "web".into(),
        host: "h".into(),
        pid: 1,
        started_ms: 0,
        last_seen_ms: 0,
    };
    q.heartbeat_web(&web, 1000).await.unwrap();
    q.web_processes().await.unwrap();
    q.remove_web_process("web").await.unwrap();
}

/// The counts, every list in both orders, a task, its result, and the other reads.
async fn exercise_the_reads(q: &Queue, done: &str) {
    q.stats().await.unwrap();
    for s in [
        ListState::Ready,
        ListState::Waiting,
        ListState::Leased,
        ListState::Dead,
        ListState::Results,
    ] {
        for o in [Order::OldestFirst, Order::NewestFirst] {
            q.list(s, o, None, 10).await.unwrap();
            q.list(s, o, Some("0:x"), 10).await.unwrap();
        }
    }
    q.get(done).await.unwrap().unwrap();
    q.result_by_id(done).await.unwrap().unwrap();
    q.stuck_leases(1000, 10).await.unwrap();
    q.events(10).await.unwrap();
    q.next_due_ms().await.unwrap();
    q.now_ms().await.unwrap();
}

/// What the dashboard keeps next to the queue: the audit log, the pause flag, sessions,
/// the sign-in limit and the id-prefix search stay in the queue's keys too.
async fn exercise_the_dashboard_keys(q: &Queue, id: &str) {
    q.audit("a", "retry", "t", 1).await.unwrap();
    q.audit_log(5).await.unwrap();
    q.pause_info().await.unwrap();
    let digest = "0f".repeat(32);
    q.sessions().put(&digest, &"s", 60).await.unwrap();
    q.sessions().get::<String>(&digest).await.unwrap();
    q.sessions().delete(&digest).await.unwrap();
    q.sessions().put(&digest, &"s", 60).await.unwrap();
    assert_eq!(q.sessions().delete_all().await.unwrap(), 1);
    let limiter = q.sign_in_attempts("10.0.0.1", 5);
    limiter.take().await.unwrap();
    limiter.give_back().await.unwrap();
    q.ids_with_prefix(&id[..4], 10, 10).await.unwrap();
}

/// Fair shares: tenants' tasks in the fair zset, their claims, polls, lease counts, list
/// and count reads, a cancel and a purge of what waits there.
async fn exercise_fair_shares(q: &Queue, p: &EnqueuePolicy) {
    let t = EnqueuePolicy {
        tenant: "acme".into(),
        ..p.clone()
    };
    let mut tenant_ids = Vec::new();
    for i in 0..4 {
        match q.enqueue(&format!("tenant {i}"), "p", &t).await.unwrap() {
            queue::Enqueued::Created(e) => tenant_ids.push(e.id),
            other => panic!("a new tenant task: {other:?}"),
        }
    }
    let tc = q.claim("w", 2, 60_000).await.unwrap();
    assert_eq!(tc.len(), 2);
    q.reschedule(&tc[0].id, tc[0].token, 0, None, 1)
        .await
        .unwrap();
    q.complete(&tc[1].id, tc[1].token, "r", 1).await.unwrap();
    q.tenants(5).await.unwrap();
    let waiting = q
        .list(ListState::Ready, Order::OldestFirst, None, 100)
        .await
        .unwrap();
    // At most two of the four tenant tasks were claimed: the others wait in the fair zset,
    // and the cancel takes one from there.
    let unclaimed = tenant_ids
        .iter()
        .find(|id| tc.iter().all(|c| c.id != **id))
        .expect("a tenant task never claimed");
    assert!(
        waiting.items.iter().any(|w| w.id == *unclaimed),
        "the unclaimed tenant task is listed ready: {:?}",
        waiting.items
    );
    assert!(
        q.cancel(unclaimed, "a").await.unwrap(),
        "a waiting tenant task is cancelled"
    );
}
