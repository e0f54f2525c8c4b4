//! The connection a [`crate::Queue`] talks through: one Redis server, or a Redis Cluster.
//!
//! Everything above this module speaks `redis::aio::ConnectionLike`, so the queue's function
//! calls (FCALL), pipelines and plain reads run unchanged on either. On a cluster, each command
//! is routed by its keys' slot (all of a queue's keys share the slot of its `{name}` hash tag),
//! MOVED/ASK redirects are followed and the topology is refreshed; keyless commands (TIME,
//! INFO) go to some primary. The Lua library is loaded on every primary, one FUNCTION LOAD
//! per node (`library.rs`).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// One server (a connection manager that reconnects by itself) or a cluster.
#[derive(Clone)]
pub enum RedisConn {
    /// One Redis server, through a connection manager that reconnects by itself.
    Single(ConnectionManager),
    /// A Redis Cluster: commands are routed by their keys' slot.
    Cluster(ClusterConnection),
}

impl From<ConnectionManager> for RedisConn {
    fn from(c: ConnectionManager) -> Self {
        RedisConn::Single(c)
    }
}

impl From<ClusterConnection> for RedisConn {
    fn from(c: ClusterConnection) -> Self {
        RedisConn::Cluster(c)
    }
}

impl RedisConn {
    /// Whether this talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConn::Cluster(_))
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// Redis `TIME` in ms, asked on `conn`. Here with the connection rather than in `queue`, so a
/// slot (which the queue holds) can ask its node's clock without naming the queue back.
pub(crate) async fn redis_now_ms(conn: &RedisConn) -> crate::error::Result<i64> {
    let mut c = conn.clone();
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await?;
    Ok(s * 1000 + us / 1000)
}
