//! A Redis Cluster master killed (`kill -9`) in the middle of a run, its replica promoted:
//! every query still ends done, with its own result.
//!
//! Six redis-servers made into a cluster of three masters with a replica each
//! (`redis-cli --cluster create --cluster-replicas 1`, node timeout 1 s). Three workers poll
//! the simulator over HTTP through cluster connections while 2,000 queries (with duplicates)
//! are asked; when about a third are done, the master owning the queue's slot is killed. Redis
//! replicates asynchronously, so the promoted replica may miss the last writes acknowledged
//! before the kill (ARCHITECTURE.md, "Failover"): a lost completion leaves the task leased, its
//! lease expires and it is polled again; a lost claim is claimed again with a greater token
//! (take_tokens), so the worker that held it is fenced out; a lost enqueue is recreated when
//! its caller asks again (here every query is asked once more after the failover). What is
//! checked: every query ends done, each result is the answer to its own query, and the calls
//! made again because of the failover are counted and printed. A redis-server that cannot
//! start (the test kit tries five free ports) or a `redis-cli --cluster create` that fails is a
//! failure, with its output: these tests are never skipped.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use queue::{Queue, QueueConfig};
use sim::SimArgs;
use testkit::cluster::{cluster_ok, node_conn};
use testkit::wait_for;

const QUEUE: &str = "failover";
const QUERIES: usize = 2_000;
/// Each key answers "processing" twice, then done: three calls a task without a failover.
pub(crate) const CALLS_PER_TASK: u64 = 3;

/// The cluster's redis-servers (the test kit's), killed however the test ends.
pub(crate) type Nodes = testkit::Cluster;

/// Three masters with a replica each, every replica in sync; a node taken for dead after 1 s,
/// so a replica takes over quickly. Panics (with the output) if it cannot be made.
pub(crate) async fn six_node_cluster() -> Nodes {
    testkit::Cluster::start(3, 1, 1_000).await
}

/// The master among `ports` that answers the slot of hash tag `tag` itself, if any.
pub(crate) async fn serving_master(ports: &[u16], tag: &str) -> Option<u16> {
    for port in ports {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
            continue;
        };
        let Ok(mut c) = client.get_multiplexed_async_connection().await else {
            continue;
        };
        let role: redis::RedisResult<Vec<redis::Value>> =
            redis::cmd("ROLE").query_async(&mut c).await;
        let is_master = role.is_ok_and(
            |r| matches!(r.first(), Some(redis::Value::BulkString(b)) if b == b"master"),
        );
        let read: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg(format!("{{{tag}}}"))
            .query_async(&mut c)
            .await;
        if is_master && read.is_ok() {
            return Some(*port);
        }
    }
    None
}

/// The port of the master that owns the slot of hash tag `tag` (it answers the tag's key
/// itself).
pub(crate) async fn owner_of(nodes: &Nodes, tag: &str) -> u16 {
    for port in nodes.ports() {
        let mut c = node_conn(port).await;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut c).await.unwrap();
        let is_master = matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master");
        let read: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg(format!("{{{tag}}}"))
            .query_async(&mut c)
            .await;
        if is_master && read.is_ok() {
            return port;
        }
    }
    panic!("no master owns the queue's slot");
}

/// The queries, with every tenth one asked twice.
pub(crate) fn texts() -> Vec<String> {
    texts_from("fo", 0, QUERIES)
}

/// Three workers on the cluster, each on its own connection, its wake-up waits seeded at one
/// of `wake_seeds` in turn; leases of 1 s (a lease lost in a failover comes back after 1 s,
/// not the default 30 s).
pub(crate) async fn three_workers(
    seeds: &[String],
    wake_seeds: &[String],
    cfg: &QueueConfig,
    up: &worker::UpstreamArgs,
    policy: &worker::PolicyArgs,
    max_idle_ms: u64,
) -> Vec<Running> {
    let mut workers = Vec::new();
    for seed in wake_seeds.iter().cycle().take(3) {
        let wq = Queue::connect_cluster(seeds, cfg.clone())
            .await
            .expect("queue");
        let pubsub = redis::Client::open(seed.as_str()).unwrap();
        let mut args = fast_worker_args(16);
        args.lease_ms = 1_000;
        args.max_idle_ms = max_idle_ms;
        let w = worker::Worker::new(
            wq,
            pubsub,
            worker::Upstream::new(up).unwrap(),
            policy.clone(),
            args,
        );
        workers.push(spawn(w));
    }
    workers
}

/// `kill -9` of the node on `port`.
pub(crate) fn kill_master(nodes: &mut Nodes, port: u16) {
    nodes.node_mut(port).kill();
}

/// Waits until a surviving master answers the slot of hash tag `tag` itself and the cluster is
/// ok again (a replica took over from the killed `dead` one); the cluster's view if not in 30 s.
pub(crate) async fn wait_promoted(nodes: &Nodes, dead: u16, tag: &str) {
    let survivors: Vec<u16> = nodes.ports().into_iter().filter(|p| *p != dead).collect();
    let t0 = Instant::now();
    loop {
        if serving_master(&survivors, tag).await.is_some() && cluster_ok(survivors[0]).await {
            return;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let mut c = node_conn(survivors[0]).await;
            let nodes_text: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut c)
                .await
                .unwrap();
            panic!("no replica promoted within 30 s:\n{nodes_text}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn ask_all(q: &Queue, texts: &[String], policy: &worker::PolicyArgs) -> usize {
    let mut asked = 0;
    for chunk in texts.chunks(200) {
        let items: Vec<(&str, &str)> = chunk.iter().map(|t| (t.as_str(), "")).collect();
        // During the failover a batch may fail as a whole: the caller asks again.
        loop {
            match q.enqueue_many(&items, &policy.enqueue_policy()).await {
                Ok(replies) => {
                    asked += replies.iter().filter(|r| r.is_ok()).count();
                    break;
                }
                Err(e) => {
                    eprintln!("failover: enqueue failed ({e}); asking again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    asked
}

/// The six-node clusters of this file, one at a time (two would share the machine's two cores).
pub(crate) static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_loses_no_query_and_mixes_no_result() {
    init_tracing();
    let _one = ONE_CLUSTER.lock().await;
    let mut nodes = six_node_cluster().await;
    let seeds = nodes.seeds();
    let cfg = QueueConfig {
        name: QUEUE.into(),
        // A lease lost in the failover comes back after 1 s, not after the default 30 s.
        max_lease_losses: 0,
        ..QueueConfig::default()
    };
    let q = Queue::connect_cluster(&seeds, cfg.clone())
        .await
        .expect("queue");
    let sim = start_sim(SimArgs {
        latency_ms: 5,
        ..SimArgs::default()
    })
    .await;
    let up = sim.upstream_args(5_000);
    let policy = fast_policy();
    let workers = three_workers(&seeds, &seeds, &cfg, &up, &policy, 1_000).await;

    let texts = texts();
    let unique: BTreeSet<String> = texts
        .iter()
        .map(|t| queue::normalise_query(t).unwrap())
        .collect();
    let producer = {
        let (q, texts, policy) = (q.clone(), texts.clone(), policy.clone());
        tokio::spawn(async move { ask_all(&q, &texts, &policy).await })
    };

    // About a third done: kill the slot's master.
    let owner = owner_of(&nodes, QUEUE).await;
    wait_for(
        "a third of the queries done",
        Duration::from_secs(60),
        async || {
            q.stats()
                .await
                .is_ok_and(|s| s.results >= (QUERIES / 3) as u64)
        },
    )
    .await;
    let calls_before = sim.stats().await.calls;
    let killed_at = Instant::now();
    kill_master(&mut nodes, owner);
    eprintln!("failover: killed master :{owner} after {calls_before} upstream calls");
    wait_promoted(&nodes, owner, QUEUE).await;
    let promoted_after = killed_at.elapsed();
    eprintln!("failover: a replica serves the slot {promoted_after:?} after the kill");
    producer.await.unwrap();
    eprintln!("failover: first round of asks done");
    // Every caller asks again once: a query whose enqueue the failover lost is created anew,
    // the others are joined or answered from their result.
    ask_all(&q, &texts, &policy).await;

    let t0 = Instant::now();
    let stats = loop {
        match q.stats().await {
            Ok(s) if s.results >= unique.len() as u64 && s.ready + s.leased + s.waiting == 0 => {
                break s
            }
            Ok(s) => assert!(
                t0.elapsed() < Duration::from_secs(90),
                "not all done after the failover: {s:?}"
            ),
            Err(e) => eprintln!("failover: stats failed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(stats.dead, 0, "{stats:?}");

    check_results(&q, &unique).await;
    let checked = unique.len();
    for w in workers {
        w.stop().await;
    }
    let calls = sim.stats().await.calls;
    let expected = unique.len() as u64 * CALLS_PER_TASK;
    eprintln!(
        "failover: replica serving after {promoted_after:?}; {checked} queries done with their own \
         results; {calls} upstream calls for {expected} without a failover ({} made again)",
        calls.saturating_sub(expected)
    );
}

/// What making an acknowledged enqueue survive a failover would take (ARCHITECTURE.md,
/// "Failover"): `WAIT 1` after the enqueue, on the queue's own connection, returns once a
/// replica has the write. On a primary with one replica: each enqueue's WAIT is acknowledged
/// by the replica, which then holds the task. (What it costs per enqueue is a speed, measured
/// outside the test suite.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_a_replica_after_an_enqueue_is_acknowledged_by_it() {
    // Full syncs to the replica at once (no diskless-sync delay), as on the cluster's nodes.
    let no_sync_delay = testkit::RedisOptions::default().with_args("--repl-diskless-sync-delay 0");
    let primary_node =
        testkit::RedisServer::start_with(no_sync_delay.clone()).unwrap_or_else(|e| panic!("{e}"));
    let primary = primary_node.port;
    let replica_node = testkit::RedisServer::start_with(
        no_sync_delay.with_args(&format!("--replicaof 127.0.0.1 {primary}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let replica = replica_node.port;
    wait_for("the replica in sync", Duration::from_secs(20), async || {
        let mut c = node_conn(replica).await;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        info.contains("master_link_status:up")
    })
    .await;
    let name = "waitack";
    let q = Queue::connect(
        &format!("redis://127.0.0.1:{primary}"),
        QueueConfig {
            name: name.into(),
            ..QueueConfig::default()
        },
    )
    .await
    .expect("queue");
    let policy = fast_policy().enqueue_policy();
    let mut c = q.connection();
    let mut on_replica = node_conn(replica).await;
    for i in 0..20 {
        let query = format!("waited {i}");
        q.enqueue(&query, "", &policy).await.unwrap();
        // Same connection as the enqueue, so the WAIT covers its write.
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(10_000)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(acked, 1, "the replica did not take enqueue {i}");
        let id = queue::TaskId::of_query(&queue::normalise_query(&query).unwrap());
        let there: bool = redis::cmd("EXISTS")
            .arg(format!("{{{name}}}:t:{id}"))
            .query_async(&mut on_replica)
            .await
            .unwrap();
        assert!(
            there,
            "acknowledged, yet the replica has no task for {query:?}"
        );
    }
}

/// `n` queries starting at number `from`, with every tenth one asked twice.
pub(crate) fn texts_from(prefix: &str, from: usize, n: usize) -> Vec<String> {
    let mut t: Vec<String> = (from..from + n)
        .map(|i| format!("{prefix} {i} polls=3"))
        .collect();
    let dups: Vec<String> = t.iter().step_by(10).cloned().collect();
    t.extend(dups);
    t
}

/// Every result answers its own query.
pub(crate) async fn check_results(q: &Queue, unique: &BTreeSet<String>) {
    for text in unique {
        let id = queue::TaskId::of_query(text);
        let r = q
            .result_by_id(&id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no result for {text:?}"));
        assert_eq!(&r.query, text);
        let data: serde_json::Value = serde_json::from_str(&r.data).unwrap();
        let key = text.split(' ').take(2).collect::<Vec<_>>().join(" ");
        assert!(
            data["query"].as_str().is_some_and(|q| q.starts_with(&key)),
            "{text}: {}",
            r.data
        );
    }
}
