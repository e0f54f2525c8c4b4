//! The freshness tests' world (api_freshness*.rs, issue 26): the real router over a private
//! Redis (the managed one) with the simulator as upstream, the windows each test sets, the
//! default upstream and optionally a named one (`search`), and workers started only when the
//! test says so (a refresh then waits where the test can look at it).
//!
//! Time: a stored result is made older (or a dead refresh's death earlier) by moving the
//! time the scripts read back in Redis ([`Env::backdate_result`], [`Env::backdate_death`]),
//! as `queue/tests/common/clock.rs` does for leases, so the windows can be long (nothing
//! runs out by itself on a slow machine) and the "after" half of a test needs no wait.
//! A part of `common` (it uses `crate::common`).
#![allow(dead_code)] // each test binary uses a different subset

use std::time::{Duration, Instant};

use app::context::{AppContext, NamedUpstream, NamedUpstreams};
use axum::{body::Body, http::Request, Router};
use queue::{Enqueued, FreshnessWindows, Queue, QueueConfig, TaskId};
use serde_json::{json, Value};
use server::{
    api::{ApiArgs, ApiState},
    managed_redis::ManagedRedis,
    web::{self, Limits, WebParts, WebState},
};
use tokio_util::sync::CancellationToken;

use crate::common::{oneshot, start_redis, tempdir, Reply};

/// A minute: the windows a test does not shorten (nothing runs out during a test).
pub const LONG: u64 = 60_000;

/// What a test sets.
pub struct Opts {
    /// The fresh window (`result_ttl_ms`).
    pub fresh_ms: u64,
    pub windows: FreshnessWindows,
    /// Partitions of every queue.
    pub partitions: u16,
    /// A named upstream `search` beside the default one.
    pub named: bool,
    /// `REPOLL_REFRESH_PER_MIN` (0 = off, the default here: tests refuse the store often).
    pub refresh_per_min: u32,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            fresh_ms: LONG,
            windows: FreshnessWindows {
                stale_ms: LONG,
                stale_if_error_ms: LONG,
                failed_ms: LONG,
                hot_asks: 0,
                refresh_ahead_per_min: 60,
            },
            partitions: 1,
            named: false,
            refresh_per_min: 0,
        }
    }
}

pub struct Env {
    pub router: Router,
    /// The default upstream's queue.
    pub queue: Queue,
    /// The named upstream `search`'s queue (when asked for).
    pub named: Option<Queue>,
    pub sim_url: String,
    redis_url: String,
    workers: CancellationToken,
    stop: CancellationToken,
    redis: Option<ManagedRedis>,
    _dir: tempdir::Dir,
}

impl Env {
    pub async fn start(opts: Opts) -> Env {
        let (redis, dir) = start_redis().await;
        let url = redis.url().to_string();
        let config = |name: &str, upstream: &str| QueueConfig {
            name: name.into(),
            upstream: upstream.into(),
            result_ttl_ms: opts.fresh_ms,
            freshness: opts.windows,
            partitions: opts.partitions,
            ..QueueConfig::default()
        };
        let queue = Queue::connect(&url, config("fresh", "")).await.unwrap();
        let named = match opts.named {
            true => Some(
                Queue::connect(&url, config("fresh-search", "search"))
                    .await
                    .unwrap(),
            ),
            false => None,
        };
        let stop = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sim_addr = listener.local_addr().unwrap();
        tokio::spawn(sim::serve(
            listener,
            sim::SimArgs::default(),
            stop.clone().cancelled_owned(),
        ));
        let live = server::live_hub::Live::start(
            redis::Client::open(url.as_str()).unwrap(),
            queue.channels().dashboard,
            Default::default(),
            stop.clone(),
        );
        let api_args = ApiArgs {
            refresh_per_min: opts.refresh_per_min,
            ..crate::common::api_unlimited()
        };
        let list = named
            .iter()
            .map(|q| NamedUpstream {
                name: "search".into(),
                queue: q.clone(),
                enqueue_policy: Default::default(),
                rate: Default::default(),
            })
            .collect();
        let state = WebState::new(WebParts {
            live,
            api: ApiState::new(&api_args, false),
            admin: Default::default(),
            leptos_options: web::leptos_options("target/site"),
            app: AppContext {
                queue: queue.clone(),
                named: NamedUpstreams {
                    list: std::sync::Arc::new(list),
                    default_rate: Default::default(),
                },
                enqueue_policy: Default::default(),
                admin: Default::default(),
                first_answer: Duration::ZERO,
                trace_url: None,
            },
        });
        let router = web::router(
            state,
            Limits {
                body_bytes: 64 * 1024,
                timeout: Duration::from_secs(60),
            },
            Router::new(),
        );
        Env {
            router,
            queue,
            named,
            sim_url: format!("http://{sim_addr}"),
            redis_url: url,
            workers: stop.child_token(),
            stop,
            redis: Some(redis),
            _dir: dir,
        }
    }

    /// Starts one worker per upstream (polls every 100 ms), all on the simulator.
    pub fn start_workers(&mut self) {
        self.workers = self.stop.child_token();
        for q in std::iter::once(&self.queue).chain(self.named.iter()) {
            let upstream = worker::Upstream::new(&worker::UpstreamArgs {
                url: format!("{}/api/query?q={{key}}", self.sim_url),
                ..Default::default()
            })
            .unwrap();
            let w = worker::Worker::new(
                q.clone(),
                redis::Client::open(self.redis_url.as_str()).unwrap(),
                upstream,
                worker::PolicyArgs {
                    poll_interval_ms: 100,
                    poll_multiplier: 1.0,
                    ..Default::default()
                },
                worker::WorkerArgs {
                    concurrency: 4,
                    grace_ms: 200,
                    ..Default::default()
                },
            );
            tokio::spawn(w.run(self.workers.clone().cancelled_owned()));
        }
    }

    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(r) = self.redis.take() {
            r.stop().await;
        }
    }

    pub async fn send(&self, req: Request<Body>) -> Reply {
        oneshot(&self.router, req).await
    }

    /// `POST /api/v1/queries` for `query` ([`ask_request`]).
    pub async fn ask(&self, query: &str, header: Option<&str>, extra: Value) -> Reply {
        self.send(ask_request(query, header, extra)).await
    }

    /// `POST` of `query` with no directives.
    pub async fn submit(&self, query: &str) -> Reply {
        self.ask(query, None, json!({})).await
    }

    /// `GET /api/v1/queries/{id}` of `query` (in the default upstream; `read_in` for another).
    pub async fn read(&self, query: &str) -> Reply {
        self.read_in(&self.queue, query).await
    }

    /// `GET /api/v1/queries/{id}` of `query` in `q`'s upstream.
    pub async fn read_in(&self, q: &Queue, query: &str) -> Reply {
        let uri = format!("/api/v1/queries/{}", id_of(q, query));
        self.send(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    /// How often the simulator was called for `key`, and how often it answered done.
    pub async fn sim_calls(&self, key: &str) -> (u64, u64) {
        let stats: Value = reqwest::get(format!("{}/_sim/stats", self.sim_url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let k = &stats["keys"][key];
        (
            k["calls"].as_u64().unwrap_or(0),
            k["done"].as_u64().unwrap_or(0),
        )
    }

    /// The queue of `upstream` (None: the default one).
    pub fn queue_of(&self, upstream: Option<&str>) -> &Queue {
        match upstream {
            Some(_) => self.named.as_ref().expect("a named upstream"),
            None => &self.queue,
        }
    }

    /// Stores `data` as the result of `query` without the upstream: its task created,
    /// claimed and completed by hand (no worker may run). Returns the completion time.
    pub async fn seed(&self, q: &Queue, query: &str, data: &str) -> i64 {
        let Enqueued::Created(t) = q.enqueue(query, "", &Default::default()).await.unwrap() else {
            panic!("{query}: nothing stored or running yet");
        };
        let token = claim_task(q, &t.id).await;
        q.complete(&t.id, token, data, 1).await.unwrap();
        q.result_by_id(&t.id).await.unwrap().unwrap().completed_ms
    }

    /// Makes the stored result of `query` `ms` older (its completion time, the first field
    /// of the stored value, moved back; the key's expiry stays). Panics unless one is stored.
    pub async fn backdate_result(&self, q: &Queue, query: &str, ms: i64) {
        let id = id_of(q, query);
        let key = format!("{}:r:{id}", q.partition_tag(q.partition_of(&id)));
        let moved: i64 = redis::Script::new(
            r"local v = redis.call('GET', KEYS[1])
              if not v then return 0 end
              local c, rest = string.match(v, '^(%d+)(,.*)$')
              local t = string.format('%d', tonumber(c) - tonumber(ARGV[1]))
              redis.call('SET', KEYS[1], t .. rest, 'KEEPTTL')
              return 1",
        )
        .key(&key)
        .arg(ms)
        .invoke_async(&mut q.connection())
        .await
        .unwrap();
        assert_eq!(moved, 1, "{key}: a stored result to backdate");
    }

    /// Moves the death of `query`'s dead task `ms` into the past (the record's `u`, which the
    /// failed window is counted from). Panics unless the task is dead.
    pub async fn backdate_death(&self, q: &Queue, query: &str, ms: i64) {
        let id = id_of(q, query);
        let key = format!("{}:t:{id}", q.partition_tag(q.partition_of(&id)));
        let moved: i64 = redis::Script::new(
            r"if redis.call('HGET', KEYS[1], 's') ~= 'dead' then return 0 end
              local u = tonumber(redis.call('HGET', KEYS[1], 'u'))
              redis.call('HSET', KEYS[1], 'u', string.format('%d', u - tonumber(ARGV[1])))
              return 1",
        )
        .key(&key)
        .arg(ms)
        .invoke_async(&mut q.connection())
        .await
        .unwrap();
        assert_eq!(moved, 1, "{key}: a dead task to backdate");
    }

    /// The sum over every minute and partition of the counter `name` of `q` (fresh, stale,
    /// miss, negative, ahead, refresh_failed).
    pub async fn counter(&self, q: &Queue, name: &str) -> i64 {
        counter(q, name).await
    }
}

/// Claims the ready task `id` by hand (no worker may run); its lease token. Other tasks may be
/// ready (tests leave refreshes waiting): they are given back.
pub async fn claim_task(q: &Queue, id: &str) -> u64 {
    let mut token = None;
    for c in q.claim("by hand", 100, 600_000).await.unwrap() {
        if c.id == id {
            token = Some(c.token);
        } else {
            q.release(&c.id, Some(c.token), "by hand").await.unwrap();
        }
    }
    token.unwrap_or_else(|| panic!("{id} was not ready to claim"))
}

/// `POST /api/v1/queries` for `query`, with `Cache-Control: header` when given and the body's
/// fields `extra` (e.g. `{"cache_control": "no-cache", "upstream": "search"}`).
pub fn ask_request(query: &str, header: Option<&str>, extra: Value) -> Request<Body> {
    let mut body = json!({ "query": query });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let mut req = Request::post("/api/v1/queries").header("content-type", "application/json");
    if let Some(h) = header {
        req = req.header("cache-control", h);
    }
    req.body(Body::from(body.to_string())).unwrap()
}

/// The sum over every minute and partition of the per-minute counter `name` of `q`, once
/// `q`'s answer counts (kept in its memory until written once a second) are written.
pub async fn counter(q: &Queue, name: &str) -> i64 {
    q.flush_answer_counts().await.unwrap();
    let mut total = 0;
    for i in 0..q.partitions() {
        let all: Vec<(String, i64)> = redis::cmd("HGETALL")
            .arg(format!("{}:tp", q.partition_tag(i)))
            .query_async(&mut q.connection())
            .await
            .unwrap();
        let suffix = format!(":{name}");
        total += all
            .iter()
            .filter(|(f, _)| f.ends_with(&suffix))
            .map(|(_, v)| v)
            .sum::<i64>();
    }
    total
}

/// The id of `query` in `q` (ids cover the upstream).
pub fn id_of(q: &Queue, query: &str) -> TaskId {
    q.task_id(&queue::normalise_query(query).unwrap())
}

/// Calls `read` until `done` says yes of its answer (20 ms apart, 10 s guard); the answer.
pub async fn until<T: std::fmt::Debug>(
    what: &str,
    mut read: impl AsyncFnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let guard = Instant::now() + Duration::from_secs(10);
    loop {
        let r = read().await;
        if done(&r) {
            return r;
        }
        assert!(
            Instant::now() < guard,
            "{what}: not within 10 s; last {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Reply {
    /// A response header as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// `Cache-Status`.
    pub fn cache_status(&self) -> &str {
        self.header("cache-status")
    }
}
