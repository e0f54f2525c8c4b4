//! Redis Cluster for tests: `masters` primaries with `replicas` replicas each, made by
//! `redis-cli --cluster create`, returned once every node says `cluster_state:ok` and every
//! replica's link to its master is up (a replica that never finished its first sync may not
//! take over, which is not what a failover test is about). Failures panic with the output.

use std::process::Command;
use std::time::Duration;

use crate::redis::{RedisOptions, RedisServer};

/// The nodes of a running cluster, killed (and their directories removed) when dropped.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each; a node is taken for dead after
    /// `node_timeout_ms` (short, so a replica takes over quickly).
    pub async fn start(masters: usize, replicas: usize, node_timeout_ms: u64) -> Cluster {
        let opts = RedisOptions::default().with_args(&format!(
            "--cluster-enabled yes --cluster-config-file nodes.conf \
             --cluster-node-timeout {node_timeout_ms} --repl-diskless-sync-delay 0"
        ));
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_with(opts.clone()).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli (package redis-tools) is needed to create the cluster");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        for port in cluster.ports() {
            crate::wait_for("cluster_state:ok", Duration::from_secs(20), async || {
                cluster_ok(port).await
            })
            .await;
        }
        for port in cluster.ports() {
            crate::wait_for("replicas in sync", Duration::from_secs(20), async || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut node_conn(port).await)
                    .await
                    .unwrap_or_default();
                info.contains("role:master") || info.contains("master_link_status:up")
            })
            .await;
        }
        cluster
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Every node's URL, for a cluster client's seeds.
    pub fn seeds(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The node on `port`.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on :{port}"))
    }
}

/// A plain (non-cluster) connection to the node on `port`.
pub async fn node_conn(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .expect("redis client")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to node :{port}: {e}"))
}

/// Whether the node on `port` answers and says `cluster_state:ok`.
pub async fn cluster_ok(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let Ok(mut c) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    let info: redis::RedisResult<String> =
        redis::cmd("CLUSTER").arg("INFO").query_async(&mut c).await;
    info.is_ok_and(|i| i.contains("cluster_state:ok"))
}
