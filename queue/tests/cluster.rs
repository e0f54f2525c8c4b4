//! The queue on a real Redis Cluster node.
//!
//! Every key of a queue carries the hash tag `{<queue>}`, and every script receives each key
//! it touches in KEYS, so a cluster keeps a queue in one slot and runs every script there. A
//! cluster node enforces exactly that: a command or script whose keys span slots fails with
//! CROSSSLOT, and a script touching a key another node owns fails. This test
//! starts a private redis-server in cluster mode (one node that owns all 16,384 slots — the
//! slot rules are the same as on a bigger cluster, and a queue lives in one slot anyway),
//! shows the rules bite, then runs every queue operation on it.

use crate::common;
use common::*;
use queue::*;
use std::time::Duration;

const CLUSTER_MODE: &str = "--cluster-enabled yes --cluster-config-file nodes.conf";

/// A plain (non-cluster) connection to one node.
async fn node_conn(node: &Server) -> redis::aio::MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Waits until the node says the cluster serves every slot.
async fn wait_cluster_ok(node: &Server) {
    let mut c = node_conn(node).await;
    for _ in 0..100 {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut c)
            .await
            .unwrap();
        if info.contains("cluster_state:ok") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("node {} never reached cluster_state:ok", node.port);
}

/// One node in cluster mode that owns all 16,384 slots.
async fn cluster_node() -> (Server, redis::aio::MultiplexedConnection) {
    let node = spawn_redis_with(CLUSTER_MODE);
    let mut c = node_conn(&node).await;
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut c)
        .await
        .expect("assign every slot to the node");
    wait_cluster_ok(&node).await;
    (node, c)
}

#[tokio::test]
async fn every_operation_runs_on_a_cluster_node() {
    let (node, mut c) = cluster_node().await;

    // The node enforces the slot rule on a script's KEYS (negative control). A legacy script
    // (no `#!lua` flags) may still reach an undeclared key the node owns, so that part of the
    // rule is covered by the static scan and the ACL test in scripts_keys.rs, and by the key
    // check at the end of this test.
    let crossing: redis::RedisResult<Option<String>> = redis::cmd("EVAL")
        .arg("return redis.call('MGET', KEYS[1], KEYS[2])[1]")
        .arg(2)
        .arg("{a}:x")
        .arg("{b}:x")
        .query_async(&mut c)
        .await;
    let err = format!("{:?}", crossing.unwrap_err());
    assert!(err.to_ascii_lowercase().contains("crossslot"), "{err}");
    // All of a queue's keys share one slot.
    let keyslot = c.clone();
    let slot = |key: String| {
        let mut c = keyslot.clone();
        async move {
            redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async::<i64>(&mut c)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        slot("{clq}:due".into()).await,
        slot("{clq}:t:abc".into()).await
    );

    // Every operation of the queue runs on the node.
    let mut conf = cfg("clq");
    conf.max_lease_losses = 1;
    let q = Queue::connect(&node.url(), conf).await.expect("connect");
    exercise_every_operation(&q).await;

    // And the node holds no key outside the queue's slot (nothing escaped the hash tag).
    let expected = slot("{clq}".into()).await;
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .unwrap();
        for k in keys {
            assert!(k.starts_with("{clq}"), "key outside the queue's tag: {k}");
            assert_eq!(slot(k.clone()).await, expected, "{k}");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

#[tokio::test]
async fn every_operation_runs_through_a_cluster_client_on_three_nodes() {
    // Three primaries (the kit's cluster: redis-cli --cluster create, every slot served).
    let cluster = testkit::Cluster::start(3, 0, 15_000).await;
    let nodes = &cluster.nodes;
    // The slot's owner answers a read of the queue's tag; the others answer MOVED.
    let mut owner_port = None;
    for n in nodes {
        let read: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg("{clq3}")
            .query_async(&mut node_conn(n).await)
            .await;
        if read.is_ok() {
            owner_port = Some(n.port);
        }
    }
    let owner_port = owner_port.expect("slot owner");
    // Seed the client with a node that does NOT own the slot: it must find the owner.
    let seed = nodes.iter().find(|n| n.port != owner_port).unwrap();
    let mut conf = cfg("clq3");
    conf.max_lease_losses = 1;
    let q = Queue::connect_cluster(&[seed.url()], conf)
        .await
        .expect("connect through the cluster");
    assert!(q.connection().is_cluster());
    exercise_every_operation(&q).await;

    // A worker's wake-up wait, started at the same non-owning seed, follows MOVED to the
    // owner and takes the entry of a new task.
    let mut wakeups = q.wakeups(redis::Client::open(seed.url()).unwrap());
    let waiting = tokio::spawn(async move { wakeups.wait(Duration::from_secs(30)).await.unwrap() });
    q.enqueue("cluster wake-up", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    assert!(waiting.await.unwrap(), "woken through the slot's owner");

    // Everything the queue wrote lives on the owner; the other nodes hold nothing.
    for n in nodes {
        let mut c = node_conn(n).await;
        let size: u64 = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
        if n.port == owner_port {
            assert!(size > 0, "owner holds the queue");
        } else {
            assert_eq!(size, 0, "node {} holds keys", n.port);
        }
    }
}

/// Names of the function libraries one node holds.
async fn libraries_on(node: &Server) -> Vec<String> {
    let list: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut node_conn(node).await)
        .await
        .unwrap();
    list.iter()
        .filter_map(|lib| lib.get("library_name"))
        .filter_map(|v| redis::from_redis_value::<String>(v.clone()).ok())
        .collect()
}

#[tokio::test]
async fn the_library_is_loaded_on_every_primary_and_heals_after_a_flush() {
    let cluster = testkit::Cluster::start(3, 0, 15_000).await;
    let nodes = &cluster.nodes;
    let seeds = cluster.seeds();
    let q = Queue::connect_cluster(&seeds, cfg("clfn"))
        .await
        .expect("connect through the cluster");
    let lib = queue::scripts::LIBRARY.name.clone();
    for n in nodes {
        assert_eq!(libraries_on(n).await, vec![lib.clone()], "node {}", n.port);
    }
    // A second process connects: every primary answers "already exists", which is success.
    let q2 = Queue::connect_cluster(&seeds, cfg("clfn"))
        .await
        .expect("connect again: the library is there");

    // The nodes lose the library (as a primary promoted from a replica that missed the load
    // would lack it): the next single call and the next pipeline load it again.
    for n in nodes {
        let () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut node_conn(n).await)
            .await
            .unwrap();
    }
    q.enqueue("after the flush", "p", &EnqueuePolicy::default())
        .await
        .expect("a single call heals");
    for n in nodes {
        assert_eq!(libraries_on(n).await, vec![lib.clone()], "node {}", n.port);
    }
    for n in nodes {
        let () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut node_conn(n).await)
            .await
            .unwrap();
    }
    let answers = q2
        .enqueue_many(
            &[("many 1", "p"), ("many 2", "p")],
            &EnqueuePolicy::default(),
        )
        .await
        .expect("the pipeline heals");
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, Ok(Enqueued::Created(_)))),
        "{answers:?}"
    );
    assert_eq!(q.stats().await.unwrap().ready, 3);
}
