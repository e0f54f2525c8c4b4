//! The `repoll` binary on a real three-node Redis Cluster (`REDIS_CLUSTER=true`): a
//! `repoll serve` (web only, with the simulator) and a `repoll worker` seeded with the nodes.
//! A query is answered; the worker is woken through Pub/Sub (its idle safety net is set to a
//! minute, so only the wake-up can start it in time); an admin signs in and acts; and every key
//! the binary wrote — task, result, history, session, sign-in counter, audit log — lives in the
//! queue's one slot on its owner, the other nodes hold nothing.

use futures::StreamExt;
use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use testkit::cluster::node_conn;
use testkit::{free_port, wait_for, ChildGuard};

use leptos::server_fn::ServerFn;

const QUEUE: &str = "clp";
const PASSWORD: &str = "cluster admin pw";

/// The test's `repoll` processes and its cluster (the test kit's), killed however the test
/// ends: the processes first, then the nodes.
struct Procs {
    children: Vec<ChildGuard>,
    _cluster: testkit::Cluster,
}

impl Procs {
    /// Spawns `cmd` as one of the test's processes.
    fn spawn(&mut self, cmd: Command, what: &str) {
        let child = ChildGuard::spawn(cmd).unwrap_or_else(|e| panic!("{what}: {e}"));
        self.children.push(child);
    }
}

/// Waits (60 s hang guard) until a client of one of the nodes is blocked in `BLPOP` (the
/// worker process's wake-up wait, `CLIENT LIST`: `cmd=blpop`, flag `b`); that node's port.
async fn wait_blocked_in_blpop(ports: &[u16]) -> u16 {
    let mut found = None;
    wait_for(
        "the worker blocked in BLPOP",
        Duration::from_secs(60),
        async || {
            for port in ports {
                let clients: String = redis::cmd("CLIENT")
                    .arg("LIST")
                    .query_async(&mut node_conn(*port).await)
                    .await
                    .unwrap();
                let blocked = clients.lines().any(|l| {
                    let field = |name: &str| {
                        l.split(' ')
                            .find_map(|f| f.strip_prefix(name).and_then(|f| f.strip_prefix('=')))
                    };
                    field("cmd") == Some("blpop") && field("flags").is_some_and(|f| f.contains('b'))
                });
                if blocked {
                    found = Some(*port);
                    return true;
                }
            }
            false
        },
    )
    .await;
    found.expect("a node")
}

/// A server-function call as a page script makes it, with an optional session cookie.
async fn post_form(
    http: &reqwest::Client,
    url: &str,
    body: String,
    session: Option<&str>,
) -> reqwest::Response {
    let mut req = http
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body);
    if let Some(id) = session {
        req = req.header("cookie", format!("repoll_session={id}"));
    }
    req.send().await.unwrap()
}

/// The environment of a `repoll` process of these tests (nothing inherited but PATH): the
/// cluster `seeds`, queue `queue`, the upstream the simulator on `sim_port`.
fn cluster_env(cmd: &mut Command, seeds: &str, queue: &str, sim_port: u16) {
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REDIS_URL", seeds)
        .env("REDIS_CLUSTER", "true")
        .env("REPOLL_QUEUE", queue)
        .env("RUST_LOG", "warn")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
}

/// A three-master cluster (no replicas, the default node timeout) for a test: the processes
/// (killed when dropped), the masters' ports and the seed list for `REDIS_URL`.
async fn cluster_for() -> (Procs, Vec<u16>, String) {
    let cluster = testkit::Cluster::start(3, 0, 15_000).await;
    let ports = cluster.ports();
    let seeds = cluster.seeds().join(",");
    let procs = Procs {
        children: Vec::new(),
        _cluster: cluster,
    };
    (procs, ports, seeds)
}

/// Waits (30 s hang guard) until `GET {base}/readyz` succeeds.
async fn wait_readyz(http: &reqwest::Client, base: &str) {
    wait_for("readyz", Duration::from_secs(30), async || {
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
}

/// Starts `repoll serve` (web only, with the simulator on `sim_port` and the admin password)
/// on `web_port` and one `repoll worker` whose idle safety net is a minute, both with the full
/// history.
fn spawn_web_only_serve_and_one_slow_idle_worker(
    procs: &mut Procs,
    seeds: &str,
    web_port: u16,
    sim_port: u16,
) {
    let common = |cmd: &mut Command| {
        cluster_env(cmd, seeds, QUEUE, sim_port);
        // Every claim and poll written to the history: the claims write those entries
        // through keys derived from the queue's prefix, which must land in its slot too.
        cmd.env("REPOLL_HISTORY", "full");
    };
    let mut serve = crate::common::process::repoll();
    serve.args(["serve", "--sim", "--workers", "0"]);
    common(&mut serve);
    serve
        .env("REPOLL_ADDR", format!("127.0.0.1:{web_port}"))
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_ADMIN_PASSWORD", PASSWORD)
        .env("REPOLL_FIRST_ANSWER_MS", "0");
    procs.spawn(serve, "repoll serve");
    let mut worker = crate::common::process::repoll();
    worker.arg("worker");
    common(&mut worker);
    // Only a wake-up can start the task in time (the idle safety net is a minute): the
    // worker's BLPOP connection starts at a seed and must follow MOVED to the slot's owner.
    worker
        .env("REPOLL_MAX_IDLE_MS", "60000")
        .env("REPOLL_POLL_INTERVAL_MS", "100");
    procs.spawn(worker, "repoll worker");
}

/// Submits one query over HTTP and waits (40 s) until it is done.
async fn submit_a_query_and_wait_until_done(http: &reqwest::Client, base: &str) {
    // A query, answered through the cluster.
    let submitted: serde_json::Value = http
        .post(format!("{base}/api/v1/queries"))
        .json(&serde_json::json!({ "query": "cluster query polls=2" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = submitted["id"].as_str().expect("an id").to_string();
    // Within 40 s, while the worker's idle timer is a minute: it was woken through Pub/Sub.
    wait_for(
        "the query to be done",
        Duration::from_secs(40),
        async || {
            let view: serde_json::Value = http
                .get(format!("{base}/api/v1/queries/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            view["status"] == "done"
        },
    )
    .await;
}

/// An admin signs in and pauses the queue, then a wrong password is tried: the session, the
/// audit log and the sign-in counter are written.
async fn sign_in_pause_and_fail_a_sign_in(http: &reqwest::Client, base: &str) {
    // An admin signs in (session, sign-in counter) and acts (audit log).
    let sign_in_url = format!("{base}{}", app::pages::admin::login::SignIn::PATH);
    let password = format!("password={}", PASSWORD.replace(' ', "+"));
    let signed = post_form(http, &sign_in_url, password, None).await;
    assert!(signed.status().is_success(), "{}", signed.status());
    let cookie = signed
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("repoll_session="))
        .and_then(|v| v.split(';').next())
        .expect("session cookie")
        .to_string();
    let act_url = format!("{base}{}", app::pages::admin::actions::Act::PATH);
    let acted = post_form(http, &act_url, "op=pause".into(), Some(&cookie)).await;
    assert!(acted.status().is_success(), "{}", acted.status());
    // A wrong password too, so the sign-in counter exists.
    post_form(http, &sign_in_url, "password=wrong".into(), None).await;
}

/// Checks every kind of key was written, all of them in the queue's slot on one node (the one
/// the worker waited on in BLPOP, `blocked_on`), and no other node holds any.
async fn check_every_key_is_in_the_slot_on_its_owner(ports: &[u16], blocked_on: u16) {
    // Every key on the slot's owner, in the queue's slot; nothing anywhere else.
    let mut all_keys = Vec::new();
    for port in ports {
        let mut c = node_conn(*port).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut c)
            .await
            .unwrap();
        all_keys.extend(keys.into_iter().map(|k| (*port, k)));
    }
    let tag = format!("{{{QUEUE}}}");
    for kind in [
        ":session:",
        ":loginfail:",
        ":audit",
        ":results",
        ":r:",
        ":h:",
    ] {
        assert!(
            all_keys.iter().any(|(_, k)| k.contains(kind)),
            "a {kind} key was written: {all_keys:?}"
        );
    }
    let owner = all_keys.first().map(|(p, _)| *p).expect("keys");
    assert_eq!(
        blocked_on, owner,
        "the worker waited for wake-ups on the slot's owner (it followed MOVED)"
    );
    for (port, key) in &all_keys {
        assert!(key.starts_with(&tag), "key outside the queue's tag: {key}");
        assert_eq!(*port, owner, "{key} on another node");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_and_worker_on_a_three_node_cluster_keep_every_key_in_the_slot() {
    let (mut procs, ports, seeds) = cluster_for().await;

    // repoll serve (web only) with the simulator, and one repoll worker.
    let web_port = free_port();
    let sim_port = free_port();
    spawn_web_only_serve_and_one_slow_idle_worker(&mut procs, &seeds, web_port, sim_port);

    let base = format!("http://127.0.0.1:{web_port}");
    let http = reqwest::Client::new();
    wait_readyz(&http, &base).await;
    // Submit only once the worker is idle, blocked in BLPOP on the wake-up list: then only a
    // wake-up can start the task in time (a worker still starting would claim it directly).
    let blocked_on = wait_blocked_in_blpop(&ports).await;

    submit_a_query_and_wait_until_done(&http, &base).await;
    sign_in_pause_and_fail_a_sign_in(&http, &base).await;
    check_every_key_is_in_the_slot_on_its_owner(&ports, blocked_on).await;
}

/// The partitioned queue of the scale-out run, and how many distinct queries it gets.
const PQUEUE: &str = "clpp";
const QUERIES: usize = 5_000;

/// Starts the scale-out run's processes, all with 12 partitions: a `repoll serve` (web only)
/// on each of `webs` (the first with the simulator on `sim_port`) and three `repoll worker`s.
fn spawn_two_webs_and_three_workers_with_twelve_partitions(
    procs: &mut Procs,
    seeds: &str,
    webs: &[u16; 2],
    sim_port: u16,
) {
    let common = |cmd: &mut Command| {
        cluster_env(cmd, seeds, PQUEUE, sim_port);
        cmd.env("REPOLL_PARTITIONS", "12")
            .env("REPOLL_RATE_PER_MIN", "1000000")
            .env("REPOLL_RATE_BURST", "100000")
            .env("REPOLL_FIRST_ANSWER_MS", "0")
            .env("REPOLL_POLL_INTERVAL_MS", "20")
            .env("REPOLL_POLL_MAX_INTERVAL_MS", "200");
    };
    for (i, web) in webs.iter().enumerate() {
        let mut serve = crate::common::process::repoll();
        serve.args(["serve", "--workers", "0"]);
        common(&mut serve);
        if i == 0 {
            serve
                .arg("--sim")
                .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"));
        }
        serve
            .env("REPOLL_ADDR", format!("127.0.0.1:{web}"))
            .env("REPOLL_ADMIN_PASSWORD", PASSWORD);
        procs.spawn(serve, "repoll serve");
    }
    for _ in 0..3 {
        let mut worker = crate::common::process::repoll();
        worker.arg("worker");
        common(&mut worker);
        worker.env("REPOLL_CONCURRENCY", "32");
        procs.spawn(worker, "repoll worker");
    }
}

/// Submits every text over HTTP, 32 at a time, alternating the web processes of `bases`, and
/// checks each submit was accepted.
async fn submit_all_alternating_the_webs(
    http: &reqwest::Client,
    bases: &[String],
    texts: &[String],
) {
    let statuses: Vec<u16> = futures::stream::iter(texts.iter().enumerate())
        .map(|(i, t)| {
            let (http, base) = (http.clone(), bases[i % 2].clone());
            async move {
                http.post(format!("{base}/api/v1/queries"))
                    .json(&serde_json::json!({ "query": t }))
                    .send()
                    .await
                    .map_or(0, |r| r.status().as_u16())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 202),
        "every submit accepted: {:?}",
        statuses
            .iter()
            .filter(|s| **s != 200 && **s != 202)
            .take(5)
            .collect::<Vec<_>>()
    );
}

/// Waits (240 s after `t0`) until every query has a result and nothing is ready, waiting,
/// leased or dead; fails at once on a dead one, printing progress every 10 s.
async fn wait_until_every_query_is_done(ports: &[u16], t0: Instant) {
    let q = queue::Queue::connect_cluster(
        &ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>(),
        queue::QueueConfig {
            name: PQUEUE.into(),
            partitions: 12,
            ..queue::QueueConfig::default()
        },
    )
    .await
    .expect("queue");
    let mut last_print = Instant::now();
    loop {
        let s = q.stats().await.expect("stats");
        if s.results >= QUERIES as u64 && s.ready + s.waiting + s.leased + s.dead == 0 {
            break;
        }
        if s.dead > 0 {
            let page = q
                .list(queue::ListState::Dead, queue::Order::OldestFirst, None, 1)
                .await
                .unwrap();
            panic!("a query died: {:?}", page.items.first());
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!("cluster_process: {:?} after submits: {s:?}", t0.elapsed());
            last_print = Instant::now();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "not all done: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks the simulator got exactly three calls per query, and a sample of answers through
/// the web process other than the one asked.
async fn check_three_calls_per_query_and_sample_answers(
    http: &reqwest::Client,
    sim_port: u16,
    bases: &[String],
) {
    let sim: serde_json::Value = http
        .get(format!("http://127.0.0.1:{sim_port}/_sim/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        sim["calls"].as_u64(),
        Some(QUERIES as u64 * 3),
        "one chain of three calls per query, none more"
    );
    // A sample of answers, through the other web process than the one asked.
    for i in (0..QUERIES).step_by(500) {
        let id = queue::TaskId::of_query(&format!("pp {i} polls=3"));
        let view: serde_json::Value = http
            .get(format!("{}/api/v1/queries/{id}", bases[(i + 1) % 2]))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(view["status"], "done", "{view}");
        assert_eq!(view["query"], format!("pp {i} polls=3"));
    }
}

/// Checks every key on every master is under the queue's tags; the number of result keys on
/// each master.
async fn check_keys_under_the_tags_and_count_results_per_master(ports: &[u16]) -> Vec<usize> {
    // Every key under the queue's tags, the partitions' on all three masters.
    let mut per_master = Vec::new();
    for port in ports {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut node_conn(*port).await)
            .await
            .unwrap();
        for k in &keys {
            assert!(
                k.starts_with(&format!("{{{PQUEUE}}}")) || k.starts_with(&format!("{{{PQUEUE}#")),
                "key outside the queue's tags: {k}"
            );
        }
        per_master.push(keys.iter().filter(|k| k.contains(":r:")).count());
    }
    per_master
}

/// The scale-out run with real processes: a queue of 12 partitions on a three-master
/// cluster, two `repoll serve` web processes (one with the simulator) and three
/// `repoll worker` processes, all with `REPOLL_PARTITIONS=12`. 5,000 queries plus 500 asked
/// twice are submitted over HTTP, alternating the two web processes: every one ends done with
/// exactly three upstream calls (the simulator's "processing, processing, done": one chain, no
/// call more), the keys of the partitions sit on all three masters (in even shares) and no key
/// is outside the queue's tags.
#[tokio::test(flavor = "multi_thread")]
async fn twelve_partitions_through_two_web_and_three_worker_processes() {
    let (mut procs, ports, seeds) = cluster_for().await;
    let webs = [free_port(), free_port()];
    let sim_port = free_port();
    spawn_two_webs_and_three_workers_with_twelve_partitions(&mut procs, &seeds, &webs, sim_port);
    // Idle connections are dropped by the client before the server's 10 s header-read timeout
    // closes them: a POST sent on a connection the server is closing fails with no answer
    // (reqwest's default keeps them 90 s; seen as status 0 on a loaded CI machine).
    let http = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let bases: Vec<String> = webs
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    for base in &bases {
        wait_readyz(&http, base).await;
    }

    let mut texts: Vec<String> = (0..QUERIES).map(|i| format!("pp {i} polls=3")).collect();
    let dups: Vec<String> = texts.iter().step_by(10).cloned().collect();
    texts.extend(dups);
    let t0 = Instant::now();
    submit_all_alternating_the_webs(&http, &bases, &texts).await;
    let submitted = t0.elapsed();

    wait_until_every_query_is_done(&ports, t0).await;
    let took = t0.elapsed();
    check_three_calls_per_query_and_sample_answers(&http, sim_port, &bases).await;

    let per_master = check_keys_under_the_tags_and_count_results_per_master(&ports).await;
    eprintln!(
        "cluster_process: {} submits in {submitted:?}, all {QUERIES} done after {took:?}; \
         results per master {per_master:?}",
        texts.len()
    );
    let (least, most) = (
        *per_master.iter().min().unwrap(),
        *per_master.iter().max().unwrap(),
    );
    assert!(
        least * 2 > most,
        "results spread over the masters: {per_master:?}"
    );
}
