//! The API tests' world (api.rs, api_limits.rs): the real router over a private Redis (the
//! managed one) with the simulator as upstream, request helpers and the API's error shape.
#![allow(dead_code)] // each test binary uses a different subset

use super::{connect_queue, start_redis, tempdir, Reply};

use std::{net::SocketAddr, time::Duration};

use app::context::AppContext;
use axum::{body::Body, http::Request, Router};
use serde_json::{json, Value};
use server::{
    api::{ApiArgs, ApiState},
    managed_redis::ManagedRedis,
    web::{self, Limits, WebParts, WebState},
};
use tokio_util::sync::CancellationToken;

/// What a test may change about the server.
pub struct Opts {
    /// Run the simulator and a worker (otherwise tasks never progress).
    pub worker: bool,
    pub api: ApiArgs,
    pub caps: server::live_hub::StreamCaps,
    pub trust_forwarded: bool,
    /// Take the upstream's callbacks (tokens checked with this key), as `repoll serve` does
    /// with `REPOLL_CALLBACK_SECRET`; `None`: callbacks off.
    pub callbacks: Option<worker::Callbacks>,
    /// The upstream's `REPOLL_UPSTREAM_MAX_RESULT`; `None`: its default.
    pub max_result_bytes: Option<usize>,
    /// The queue's fresh window (`REPOLL_FRESH_FOR_MS`); `None`: its default.
    pub fresh_for_ms: Option<u64>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            worker: false,
            api: ApiArgs {
                rate_per_min: 0,
                ..ApiArgs::default()
            },
            caps: Default::default(),
            trust_forwarded: false,
            callbacks: None,
            max_result_bytes: None,
            fresh_for_ms: None,
        }
    }
}

pub struct Env {
    pub router: Router,
    /// The router's state (its live hub and query feeds, for counters).
    pub state: WebState,
    pub queue: queue::Queue,
    pub sim_url: String,
    pub redis: Option<ManagedRedis>,
    pub stop: CancellationToken,
    pub _dir: tempdir::Dir,
}

impl Env {
    pub async fn start(opts: Opts) -> Env {
        let (redis, dir) = start_redis().await;
        let url = redis.url().to_string();
        let queue = match opts.fresh_for_ms {
            None => connect_queue(&url, "apitest").await,
            Some(ms) => queue::Queue::connect(
                &url,
                queue::QueueConfig {
                    name: "apitest".into(),
                    result_ttl_ms: ms,
                    ..Default::default()
                },
            )
            .await
            .expect("connect"),
        };
        let stop = CancellationToken::new();

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sim_addr = listener.local_addr().unwrap();
        tokio::spawn(sim::serve(
            listener,
            sim::SimArgs::default(),
            stop.clone().cancelled_owned(),
        ));
        let defaults = worker::UpstreamArgs::default();
        let upstream_args = worker::UpstreamArgs {
            url: format!("http://{sim_addr}/api/query?q={{key}}"),
            max_result_bytes: opts.max_result_bytes.unwrap_or(defaults.max_result_bytes),
            ..defaults
        };
        if opts.worker {
            let upstream = worker::Upstream::new(&upstream_args).unwrap();
            let policy = worker::PolicyArgs {
                poll_interval_ms: 100,
                poll_multiplier: 1.0,
                ..Default::default()
            };
            let w = worker::Worker::new(
                queue.clone(),
                redis::Client::open(url.as_str()).unwrap(),
                upstream,
                policy,
                worker::WorkerArgs {
                    concurrency: 4,
                    grace_ms: 200,
                    ..Default::default()
                },
            );
            tokio::spawn(w.run(stop.clone().cancelled_owned()));
        }

        let live = server::live_hub::Live::start(
            redis::Client::open(url.as_str()).unwrap(),
            queue.channels().dashboard,
            opts.caps,
            stop.clone(),
        );
        let mut api = ApiState::new(&opts.api, opts.trust_forwarded);
        api.callbacks = opts.callbacks.map(|callbacks| {
            // The default upstream's answers, read as its polls are (serve.rs does the same).
            let upstream = worker::Upstream::new(&upstream_args).unwrap();
            server::api::CallbackReceiver {
                callbacks,
                upstreams: vec![server::api::CallbackUpstream {
                    name: String::new(),
                    queue: queue.clone(),
                    reader: upstream.reader().clone(),
                    max_body: upstream.max_body(),
                    max_result: upstream.max_result(),
                }],
            }
        });
        let state = WebState::new(WebParts {
            live,
            api,
            admin: Default::default(),
            leptos_options: web::leptos_options("target/site"),
            app: AppContext {
                queue: queue.clone(),
                named: Default::default(),
                enqueue_policy: Default::default(),
                admin: Default::default(),
                first_answer: Duration::from_millis(opts.api.first_answer_ms),
                trace_url: None,
            },
        });
        // The request timeout well above the queue's Redis response timeout (10 s), as
        // `repoll serve` sets it above its web connection's (2 s): a Redis error is answered
        // by the handler, never raced by this layer's own 503.
        assert!(queue::RESPONSE_TIMEOUT < Duration::from_secs(60));
        let router = web::router(
            state.clone(),
            Limits {
                body_bytes: 64 * 1024,
                timeout: Duration::from_secs(60),
            },
            Router::new(),
        );
        Env {
            router,
            state,
            queue,
            sim_url: format!("http://{sim_addr}"),
            redis: Some(redis),
            stop,
            _dir: dir,
        }
    }

    pub async fn send(&self, req: Request<Body>) -> Reply {
        super::oneshot(&self.router, req).await
    }

    pub async fn submit(&self, query: &str) -> Reply {
        self.send(post_json(&json!({ "query": query }).to_string()))
            .await
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    pub async fn sim_key(&self, key: &str) -> Value {
        let stats: Value = reqwest::get(format!("{}/_sim/stats", self.sim_url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        stats["keys"][key].clone()
    }

    /// Serves this router through the real accept loop (`server::http_server::serve`, as
    /// `repoll serve` does) on a free port of 127.0.0.1; the address. Stops with the env.
    pub async fn listen(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::http_server::serve(
            listener,
            self.router.clone(),
            server::http_server::ConnLimits {
                max_connections: 64,
                header_timeout: Duration::from_secs(10),
            },
            Default::default(),
            self.stop.clone(),
            Duration::from_millis(200),
        ));
        addr
    }

    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(r) = self.redis.take() {
            r.stop().await;
        }
    }
}

impl Reply {
    /// Asserts the API's error shape and returns the code.
    pub fn error_code(&self) -> &str {
        assert!(
            self.json["error"]["message"].is_string(),
            "error shape: {} {}",
            self.status,
            self.body
        );
        self.json["error"]["code"].as_str().unwrap()
    }
}

pub fn post_json(body: &str) -> Request<Body> {
    Request::post("/api/v1/queries")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// Whether the task of `query` exists in Redis (a record or a stored result).
pub async fn exists(env: &Env, query: &str) -> bool {
    let id = queue::TaskId::of_query(&queue::normalise_query(query).unwrap());
    env.queue.get(&id).await.unwrap().is_some()
}
