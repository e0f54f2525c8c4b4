//! Wake-ups: how an idle worker process learns that work is ready, one worker per unit of work.
//!
//! Every script that makes a task ready now pushes one entry onto the queue's wake-up list
//! (`{name}:wakeups`, at most [`WAKE_CAP`] entries); an idle worker process waits on it with
//! `BLPOP`. Redis serves blocked clients first come, first served and hands each entry to
//! exactly one of them, so one enqueue wakes one worker. (A Pub/Sub message, used before, woke
//! every idle worker, and all but one of them then claimed nothing.) Claims remove as many
//! entries as tasks they take, so the list tracks ready work nobody has claimed yet, and a
//! worker that is busy chaining tasks (`complete_and_claim`) never needs a wake-up at all.
//!
//! `BLPOP` blocks the connection it runs on, so [`Wakeups`] has a dedicated one, never the
//! queue's shared multiplexed connection. On a Redis Cluster the seed node answers `MOVED` for
//! the queue's slot unless it owns it; the connection follows the redirect.
//!
//! An entry can be lost (a worker's connection drops just after Redis popped for it); that
//! costs latency, not work: workers never sleep longer than their safety interval (1 s by
//! default) without claiming.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr};

use crate::{Queue, Result};

/// Most entries the wake-up list holds. More entries than idle worker processes wake nobody
/// more; the cap bounds the list (a few bytes an entry) when nobody is idle to take them.
pub const WAKE_CAP: u32 = 1000;

/// Longest a single wait blocks (also the floor of its response timeout).
const MAX_WAIT: Duration = Duration::from_secs(60);

/// Time to open the dedicated connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A cluster redirect is followed at most this many times per wait (a slot being migrated
/// may answer MOVED twice).
const MAX_REDIRECTS: usize = 3;

/// A worker process's wait for wake-up entries, on a connection of its own.
pub struct Wakeups {
    /// Where the next connection goes: the seed, or the node a MOVED named.
    client: Client,
    /// The client this waiter was made with: after an error the next connection starts here
    /// again, so a waiter that followed MOVED to a master that then died finds the replica
    /// promoted in its place instead of knocking on the dead node forever.
    seed: Client,
    key: String,
    conn: Option<MultiplexedConnection>,
}

impl std::fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client's connection info holds the password: never printed.
        f.debug_struct("Wakeups").field("key", &self.key).finish()
    }
}

impl Queue {
    /// A wake-up waiter for this queue. `client` opens its dedicated connection: the same
    /// server as the queue's (on a cluster, any node: the waiter follows MOVED).
    ///
    /// Of a partitioned queue, this is partition 0's list; see [`Queue::partition_wakeups`].
    pub fn wakeups(&self, client: Client) -> Wakeups {
        Wakeups::on(client, self.slots()[0].keys().wakeups.clone())
    }

    /// One waiter per partition (index = partition), each to run on its own: a partition's
    /// scripts can only push onto a list in its own slot, so a worker process waits on every
    /// partition's list and claims from the one that woke it
    /// ([`Queue::claim_woken_at`]). One waiter for a queue of one partition.
    pub fn partition_wakeups(&self, client: &Client) -> Vec<Wakeups> {
        self.slots()
            .iter()
            .map(|s| Wakeups::on(client.clone(), s.keys().wakeups.clone()))
            .collect()
    }
}

impl Wakeups {
    /// A waiter on the wake-up list `key`, connecting through `client` on first use.
    fn on(client: Client, key: String) -> Wakeups {
        Wakeups {
            seed: client.clone(),
            client,
            key,
            conn: None,
        }
    }

    /// Blocks up to `timeout` (at most 60 s) for a wake-up entry. `Ok(true)`: this process
    /// took one, so its next claim should be [`Queue::claim_woken`] with `woken = true`.
    /// `Ok(false)`: none came in time. On an error the connection is dropped and re-made by
    /// the next call; the caller backs off.
    ///
    /// Cancel-safe as far as Redis allows: if this future is dropped mid-wait, its connection
    /// is dropped with it, and Redis forgets a blocked client whose connection closed.
    pub async fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let timeout = timeout.clamp(Duration::from_millis(10), MAX_WAIT);
        for _ in 0..=MAX_REDIRECTS {
            // Taken out for the duration of the call: a dropped future drops the connection.
            let mut conn = match self.conn.take() {
                Some(c) => c,
                None => match self.connect().await {
                    Ok(c) => c,
                    Err(e) => {
                        self.client = self.seed.clone();
                        return Err(e);
                    }
                },
            };
            let reply: redis::RedisResult<Option<(String, String)>> = redis::cmd("BLPOP")
                .arg(&self.key)
                .arg(timeout.as_secs_f64())
                .query_async(&mut conn)
                .await;
            match reply {
                Ok(entry) => {
                    self.conn = Some(conn);
                    return Ok(entry.is_some());
                }
                Err(e) => {
                    // redis-rs gives ("host:port", slot) for MOVED and ASK.
                    let target = e
                        .redirect_node()
                        .and_then(|(addr, _slot)| addr.rsplit_once(':'))
                        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)));
                    if let Some((host, port)) = target {
                        let info = self.client.get_connection_info().clone();
                        // "MOVED <slot> :<port>" (no host) means the host we asked.
                        let host = match (host.as_str(), info.addr()) {
                            ("" | "?", ConnectionAddr::Tcp(current, _)) => current.clone(),
                            _ => host,
                        };
                        let info = info.set_addr(ConnectionAddr::Tcp(host, port));
                        self.client = Client::open(info)?;
                        continue;
                    }
                    self.client = self.seed.clone();
                    return Err(e.into());
                }
            }
        }
        Err(crate::error::corrupt(
            "wake-up wait: too many cluster redirects",
        ))
    }

    async fn connect(&self) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            // A BLPOP's reply comes after its own timeout (at most MAX_WAIT); allow for a busy
            // server on top.
            .set_response_timeout(Some(MAX_WAIT + Duration::from_secs(5)));
        Ok(self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }
}
