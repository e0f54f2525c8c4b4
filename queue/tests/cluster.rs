//! The queue on a real Redis Cluster node.
//!
//! Every key of a queue carries the hash tag `{<queue>}`, and every script receives each key
//! it touches in KEYS, so a cluster keeps a queue in one slot and runs every script there. A
//! cluster node enforces exactly that: a command or script whose keys span slots fails with
//! CROSSSLOT, and a script touching a key another node owns fails. This test
//! starts a private redis-server in cluster mode (one node that owns all 16,384 slots — the
//! slot rules are the same as on a bigger cluster, and a queue lives in one slot anyway),
//! shows the rules bite, then runs every queue operation on it.

mod common;
use common::*;
use queue::*;
use std::time::Duration;

async fn cluster_node() -> (Server, redis::aio::MultiplexedConnection) {
    let node = spawn_redis_with("--cluster-enabled yes --cluster-config-file nodes.conf");
    let mut c = redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut c)
        .await
        .expect("assign every slot to the node");
    for _ in 0..100 {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut c)
            .await
            .unwrap();
        if info.contains("cluster_state:ok") {
            return (node, c);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cluster did not reach state ok");
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

/// Three primaries made into a cluster by `redis-cli --cluster create`.
async fn three_node_cluster() -> Vec<Server> {
    let nodes: Vec<Server> = (0..3)
        .map(|_| spawn_redis_with("--cluster-enabled yes --cluster-config-file nodes.conf"))
        .collect();
    let mut cmd = std::process::Command::new("redis-cli");
    cmd.arg("--cluster").arg("create");
    for n in &nodes {
        cmd.arg(format!("127.0.0.1:{}", n.port));
    }
    let out = cmd
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli (package redis-tools) is needed to create the cluster");
    assert!(
        out.status.success(),
        "cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for n in &nodes {
        let mut c = redis::Client::open(n.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut ok = false;
        for _ in 0..100 {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut c)
                .await
                .unwrap();
            if info.contains("cluster_state:ok") {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ok, "node {} never reached cluster_state:ok", n.port);
    }
    nodes
}

#[tokio::test]
async fn every_operation_runs_through_a_cluster_client_on_three_nodes() {
    let nodes = three_node_cluster().await;
    let conn = |n: &Server| {
        let url = n.url();
        async move {
            redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap()
        }
    };
    // Which node owns the queue's slot (CLUSTER SLOTS: [start, end, [ip, port, ..], ..]).
    let mut c0 = conn(&nodes[0]).await;
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("{clq3}")
        .query_async(&mut c0)
        .await
        .unwrap();
    let ranges: Vec<(i64, i64, (String, u16))> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Vec<redis::Value>>(&mut c0)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            // [start, end, [ip, port, id, (metadata)], replicas...]
            let row: Vec<redis::Value> = redis::FromRedisValue::from_redis_value(r).unwrap();
            let num = |v: &redis::Value| -> i64 {
                redis::FromRedisValue::from_redis_value(v.clone()).unwrap()
            };
            let node: Vec<redis::Value> =
                redis::FromRedisValue::from_redis_value(row[2].clone()).unwrap();
            let ip: String = redis::FromRedisValue::from_redis_value(node[0].clone()).unwrap();
            (num(&row[0]), num(&row[1]), (ip, num(&node[1]) as u16))
        })
        .collect();
    let owner_port = ranges
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, n)| n.1)
        .expect("slot owner");
    // Seed the client with a node that does NOT own the slot: it must find the owner.
    let seed = nodes.iter().find(|n| n.port != owner_port).unwrap();
    let mut conf = cfg("clq3");
    conf.max_lease_losses = 1;
    let q = Queue::connect_cluster(&[seed.url()], conf)
        .await
        .expect("connect through the cluster");
    assert!(q.connection().is_cluster());
    exercise_every_operation(&q).await;

    // Everything the queue wrote lives on the owner; the other nodes hold nothing.
    for n in &nodes {
        let mut c = conn(n).await;
        let size: u64 = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
        if n.port == owner_port {
            assert!(size > 0, "owner holds the queue");
        } else {
            assert_eq!(size, 0, "node {} holds keys", n.port);
        }
    }
}
