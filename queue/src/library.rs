//! Loading and calling the Lua library ([`crate::scripts::LIBRARY`]).
//!
//! Loaded once per primary at connect ([`load`]). Redis can lose it later: a restart without
//! persistence, a failover to a node that missed the load, `FUNCTION FLUSH`. A call that meets
//! "Function not found" loads the library again and retries once ([`call`]); a pipeline finds
//! its failed items and resends only those ([`call_many`]).

use crate::conn::RedisConn;
use crate::error::{config, corrupt, Result};
use crate::key_decl::KeyDecl;
use crate::keys::Keys;
use crate::scripts::{FunctionDef, LIBRARY};
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, ToRedisArgs, Value};

/// The oldest Redis with Functions (and FCALL_RO).
pub const MIN_REDIS: (u32, u32) = (7, 0);

/// One call of a library function: its KEYS, built from the function's declaration
/// ([`FunctionDef::keys`], key_decl.rs) and the slot's layout, and its ARGV, built like a
/// `redis::ScriptInvocation`.
pub(crate) struct Invocation<'a> {
    function: &'a FunctionDef,
    layout: Option<&'a Keys>,
    /// The call's task: what the declared `task`, `hist`, `result`, `partial` and `worker` name.
    task: Option<String>,
    /// Keys the caller gives by name (`<name>` in the header).
    given: Vec<(&'static str, String)>,
    /// The keys of the batch items so far, in order.
    item_keys: Vec<String>,
    /// The first item whose keys could not be built (reported by [`Invocation::cmd`]).
    item_missing: Option<String>,
    args: Vec<Vec<u8>>,
}

impl<'a> Invocation<'a> {
    /// A call of `function` on the keys of `layout` (None: every key is given by the caller).
    pub(crate) fn new(function: &'a FunctionDef, layout: Option<&'a Keys>) -> Self {
        Invocation {
            function,
            layout,
            task: None,
            given: Vec::new(),
            item_keys: Vec::new(),
            item_missing: None,
            args: Vec::new(),
        }
    }

    /// The task the declared task keys (`task`, `hist`, `result`, `partial`, `worker`) are of.
    pub(crate) fn for_task(&mut self, id: &str) -> &mut Self {
        self.task = Some(id.to_string());
        self
    }

    /// The key the header declares as `<name>`.
    pub(crate) fn given(&mut self, name: &'static str, key: impl Into<String>) -> &mut Self {
        self.given.push((name, key.into()));
        self
    }

    /// One more item of a batch call: the header's per-item keys of task `id`.
    pub(crate) fn item(&mut self, id: &str) -> &mut Self {
        for name in &self.function.keys().per_item {
            match self.layout.and_then(|k| k.named(name, Some(id))) {
                Some(key) => self.item_keys.push(key),
                None => {
                    self.item_missing.get_or_insert_with(|| name.clone());
                }
            }
        }
        self
    }

    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// `FCALL name numkeys keys... args...` (FCALL_RO for a read-only function). A declared
    /// key the call cannot name (no task set, a given key missing) is an error here, before
    /// anything is sent.
    pub(crate) fn cmd(&self) -> Result<Cmd> {
        let verb = if self.function.read_only {
            "FCALL_RO"
        } else {
            "FCALL"
        };
        let decl = self.function.keys();
        let missing = |name: &str| {
            corrupt(format!(
                "{}: the call gives no key for its declared {name}",
                self.function.name
            ))
        };
        if let Some(name) = &self.item_missing {
            return Err(missing(name));
        }
        let mut cmd = redis::cmd(verb);
        cmd.arg(LIBRARY.function_name(self.function))
            .arg(decl.fixed.len() + self.item_keys.len());
        for token in &decl.fixed {
            let key = if token.starts_with('<') {
                let name = KeyDecl::lua_name(token);
                self.given
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, k)| k.clone())
            } else {
                self.layout
                    .and_then(|k| k.named(token, self.task.as_deref()))
            };
            cmd.arg(key.ok_or_else(|| missing(token))?);
        }
        for k in &self.item_keys {
            cmd.arg(k.as_str());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        Ok(cmd)
    }
}

/// Whether Redis answered that the function (so the library) is not loaded on that node.
pub(crate) fn is_function_missing(e: &redis::RedisError) -> bool {
    e.to_string().contains("Function not found")
}

/// Runs one call; when the node has lost the library, loads it and retries once.
pub(crate) async fn call(conn: &RedisConn, inv: &Invocation<'_>) -> Result<Value> {
    let mut c = conn.clone();
    let cmd = inv.cmd()?;
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
        pipe.add_command(inv.cmd()?);
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
            again.add_command(invs[i].cmd()?);
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
    use crate::scripts::{FUNCTIONS, SCRIPTS};

    /// A command's words as strings: [FCALL, name, numkeys, keys..., args...].
    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<other>".to_string(),
            })
            .collect()
    }

    /// Every key every header declares is one the layout can name (given keys aside), so no
    /// call can fail for want of a key; and a task's keys need the call's task.
    #[test]
    fn every_declared_key_resolves_in_the_layout() {
        let k = Keys::new("q");
        for f in FUNCTIONS {
            let decl = f.keys();
            for name in decl.fixed.iter().filter(|t| !t.starts_with('<')) {
                assert!(k.named(name, Some("id")).is_some(), "{}: {name}", f.name);
            }
            for name in &decl.per_item {
                assert!(
                    k.named(name, Some("id")).is_some(),
                    "{}: item {name}",
                    f.name
                );
            }
        }
        assert_eq!(k.named("task", None), None);
        assert_eq!(k.named("nonsense", Some("id")), None);
    }

    /// The order Rust sends KEYS in is the header's: the fixed keys (the `[claim]` group
    /// first for a claiming function), then each item's keys in turn.
    #[test]
    fn keys_go_in_the_declared_order() {
        let k = Keys::new("q");
        let mut inv = Invocation::new(&SCRIPTS.complete, Some(&k));
        inv.item("a").item("b").arg("x");
        let w = words(&inv.cmd().unwrap());
        let claim = [
            "ready", "ready:bg", "due", "retry", "lease", "token", "paused", "share", "events",
            "fair", "fairt", "fairv", "fairc", "fairr", "breaker", "wakeups",
        ];
        let mut want: Vec<String> = claim.iter().map(|s| format!("{{q}}:{s}")).collect();
        want.extend(["{q}:results", "{q}:tp", "{q}:tpmin"].map(String::from));
        for id in ["a", "b"] {
            want.extend(["t", "h", "r", "p"].map(|x| format!("{{q}}:{x}:{id}")));
        }
        assert_eq!(
            w[..2],
            [
                "FCALL".to_string(),
                LIBRARY.function_name(&SCRIPTS.complete)
            ]
        );
        assert_eq!(w[2], want.len().to_string());
        assert_eq!(w[3..3 + want.len()], want[..]);
        assert_eq!(w[3 + want.len()..], ["x".to_string()]);

        let mut renew = Invocation::new(&SCRIPTS.renew, Some(&k));
        let err = renew.cmd().unwrap_err().to_string();
        assert!(err.contains("task"), "a task key without a task: {err}");
        renew.for_task("a");
        assert_eq!(words(&renew.cmd().unwrap())[3..5], ["{q}:t:a", "{q}:lease"]);

        let mut list = Invocation::new(&SCRIPTS.list, Some(&k));
        assert!(list.cmd().is_err(), "a given key not given");
        list.given("zset", "{q}:dead");
        let w = words(&list.cmd().unwrap());
        assert_eq!(w[0], "FCALL_RO", "list only reads");
        assert_eq!(w[3], "{q}:dead");
    }

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
