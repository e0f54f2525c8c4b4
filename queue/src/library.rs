//! Loading and calling the Lua library ([`crate::scripts::LIBRARY`]).
//!
//! Loaded once per primary at connect ([`load`]). Redis can lose it later: a restart without
//! persistence, a failover to a node that missed the load, `FUNCTION FLUSH`. A call that meets
//! "Function not found" loads the library again and retries once ([`call`]); a pipeline finds
//! its failed items and resends only those ([`call_many`]).

use crate::conn::RedisConn;
use crate::error::{config, corrupt, Result};
use crate::scripts::{FunctionDef, LIBRARY};
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, ToRedisArgs, Value};

/// The oldest Redis with Functions (and FCALL_RO).
pub const MIN_REDIS: (u32, u32) = (7, 0);

/// One call of a library function: its KEYS and ARGV, built like a `redis::ScriptInvocation`.
pub(crate) struct Invocation<'a> {
    function: &'a FunctionDef,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl<'a> Invocation<'a> {
    pub(crate) fn new(function: &'a FunctionDef) -> Self {
        Invocation {
            function,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// `FCALL name numkeys keys... args...` (FCALL_RO for a read-only function).
    pub(crate) fn cmd(&self) -> Cmd {
        let verb = if self.function.read_only {
            "FCALL_RO"
        } else {
            "FCALL"
        };
        let mut cmd = redis::cmd(verb);
        cmd.arg(LIBRARY.function_name(self.function))
            .arg(self.keys.len());
        for k in &self.keys {
            cmd.arg(k.as_slice());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        cmd
    }
}

/// Whether Redis answered that the function (so the library) is not loaded on that node.
pub(crate) fn is_function_missing(e: &redis::RedisError) -> bool {
    e.to_string().contains("Function not found")
}

/// Runs one call; when the node has lost the library, loads it and retries once.
pub(crate) async fn call(conn: &RedisConn, inv: &Invocation<'_>) -> Result<Value> {
    let mut c = conn.clone();
    let cmd = inv.cmd();
    match cmd.query_async::<Value>(&mut c).await {
        Err(e) if is_function_missing(&e) => {
            load(conn).await?;
            Ok(cmd.query_async::<Value>(&mut c).await?)
        }
        other => Ok(other?),
    }
}

/// Runs calls in one pipeline (one round trip). Items that met "Function not found" (the
/// node lost the library mid-way) are sent again, alone, after one load; the others keep
/// their answer. Every other server error stays the answer of its item.
pub(crate) async fn call_many(conn: &RedisConn, invs: &[Invocation<'_>]) -> Result<Vec<Value>> {
    let mut c = conn.clone();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for inv in invs {
        pipe.add_command(inv.cmd());
    }
    let mut replies: Vec<Value> = pipe.query_async(&mut c).await?;
    if replies.len() != invs.len() {
        return Err(corrupt("pipeline: reply count differs from the batch"));
    }
    let missing: Vec<usize> = (0..replies.len())
        .filter(|&i| value_is_function_missing(&replies[i]))
        .collect();
    if !missing.is_empty() {
        load(conn).await?;
        let mut again = redis::pipe();
        again.ignore_errors();
        for &i in &missing {
            again.add_command(invs[i].cmd());
        }
        let resent: Vec<Value> = again.query_async(&mut c).await?;
        if resent.len() != missing.len() {
            return Err(corrupt(
                "pipeline: reply count differs from the resent items",
            ));
        }
        for (i, v) in missing.into_iter().zip(resent) {
            replies[i] = v;
        }
    }
    Ok(replies)
}

fn value_is_function_missing(v: &Value) -> bool {
    match v {
        Value::ServerError(e) => e.details().unwrap_or("").contains("Function not found"),
        _ => false,
    }
}

/// Loads the library on every primary: one `FUNCTION LOAD` on a single server, one per
/// master on a cluster. "already exists" is success: the name carries the source's hash, so
/// a library of that name is this very code (another process or an earlier call loaded it).
pub(crate) async fn load(conn: &RedisConn) -> Result<()> {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg(LIBRARY.source.as_str());
    match conn {
        RedisConn::Single(c) => {
            let mut c = c.clone();
            match cmd.query_async::<Value>(&mut c).await {
                Ok(_) => Ok(()),
                Err(e) if is_already_loaded(&e.to_string()) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        RedisConn::Cluster(c) => {
            // Sent per master with no response policy: redis-rs then answers a map of node
            // -> reply (errors included) instead of failing the whole on one "already exists".
            let mut c = c.clone();
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let answer = c.route_command(cmd, routing).await?;
            let Value::Map(per_node) = answer else {
                return Err(corrupt(format!(
                    "FUNCTION LOAD: unexpected answer {answer:?}"
                )));
            };
            for (node, reply) in per_node {
                if let Value::ServerError(e) = &reply {
                    let text = format!("{} {}", e.code(), e.details().unwrap_or(""));
                    if !is_already_loaded(&text) {
                        return Err(corrupt(format!("FUNCTION LOAD on {node:?}: {text}")));
                    }
                }
            }
            Ok(())
        }
    }
}

fn is_already_loaded(error_text: &str) -> bool {
    error_text.contains("already exists")
}

/// Refuses a Redis older than [`MIN_REDIS`], naming the version found and the one needed. On a
/// cluster, INFO goes to every node (redis-rs answers a map of node -> reply): each must do.
pub(crate) async fn check_version(conn: &RedisConn) -> Result<()> {
    let mut c = conn.clone();
    let answer: Value = redis::cmd("INFO").arg("server").query_async(&mut c).await?;
    let replies = match answer {
        Value::Map(per_node) => per_node.into_iter().map(|(_, v)| v).collect(),
        one => vec![one],
    };
    for reply in replies {
        let info: String =
            redis::from_redis_value(reply).map_err(|e| corrupt(format!("INFO server: {e}")))?;
        let found = redis_version(&info)
            .ok_or_else(|| corrupt("INFO server: no redis_version line".to_string()))?;
        version_supported(found)?;
    }
    Ok(())
}

/// The `redis_version:` of an `INFO server` answer.
pub(crate) fn redis_version(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(str::trim)
}

/// Ok when `version` ("7.2.4") is at least [`MIN_REDIS`].
pub(crate) fn version_supported(version: &str) -> Result<()> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    let major_minor = match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Some((major, minor)),
        _ => None,
    };
    match major_minor {
        Some(found) if found >= MIN_REDIS => Ok(()),
        // The Redis the settings name cannot run the queue: the operator's choice to change,
        // not damaged data.
        _ => Err(config(format!(
            "Redis {version} is too old or unknown: repoll needs Redis {}.{} or newer (Redis \
             Functions, FCALL_RO)",
            MIN_REDIS.0, MIN_REDIS.1
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_versions_below_7_are_refused_by_name() {
        let info = "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n";
        assert_eq!(redis_version(info), Some("6.2.14"));
        let err = version_supported("6.2.14").unwrap_err().to_string();
        assert!(err.contains("6.2.14") && err.contains("7.0"), "{err}");
        assert!(version_supported("7.0.15").is_ok());
        assert!(version_supported("7.2.4").is_ok());
        assert!(version_supported("8.0.0").is_ok());
        assert!(version_supported("10.1").is_ok());
        assert!(version_supported("garbage").is_err());
        assert_eq!(redis_version("# Server\r\n"), None);
    }
}
