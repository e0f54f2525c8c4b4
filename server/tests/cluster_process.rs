//! The `repoll` binary on a real three-node Redis Cluster (`REDIS_CLUSTER=true`): a
//! `repoll serve` (web only, with the simulator) and a `repoll worker` seeded with the nodes.
//! A query is answered; the worker is woken through Pub/Sub (its idle safety net is set to a
//! minute, so only the wake-up can start it in time); an admin signs in and acts; and every key
//! the binary wrote — task, result, history, session, sign-in counter, audit log — lives in the
//! queue's one slot on its owner, the other nodes hold nothing.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use leptos::server_fn::ServerFn;

const QUEUE: &str = "clp";
const PASSWORD: &str = "cluster admin pw";

/// Children killed (and the temp dir removed) however the test ends.
struct Procs {
    children: Vec<Child>,
    dir: PathBuf,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn wait_for(what: &str, limit: Duration, mut ok: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if ok().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within {limit:?}");
}

async fn node_conn(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
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

#[tokio::test(flavor = "multi_thread")]
async fn serve_and_worker_on_a_three_node_cluster_keep_every_key_in_the_slot() {
    let dir = std::env::temp_dir().join(format!("repoll-clp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut procs = Procs {
        children: Vec::new(),
        dir: dir.clone(),
    };

    // Three primaries.
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    for (i, port) in ports.iter().enumerate() {
        let node_dir = dir.join(format!("n{i}"));
        std::fs::create_dir_all(&node_dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&node_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        procs.children.push(child);
    }
    for port in &ports {
        wait_for("redis node up", Duration::from_secs(10), async || {
            redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .is_ok()
        })
        .await;
    }
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli (redis-tools)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for port in &ports {
        wait_for("cluster_state:ok", Duration::from_secs(20), async || {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut node_conn(*port).await)
                .await
                .unwrap_or_default();
            info.contains("cluster_state:ok")
        })
        .await;
    }
    let seeds = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");

    // repoll serve (web only) with the simulator, and one repoll worker.
    let web_port = free_port();
    let sim_port = free_port();
    let common = |cmd: &mut Command| {
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("REDIS_URL", &seeds)
            .env("REDIS_CLUSTER", "true")
            .env("REPOLL_QUEUE", QUEUE)
            // Every claim and poll written to the history: the claims write those entries
            // through keys derived from the queue's prefix, which must land in its slot too.
            .env("REPOLL_HISTORY", "full")
            .env("RUST_LOG", "warn")
            .env(
                "REPOLL_UPSTREAM_URL",
                format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
    };
    let mut serve = Command::new(env!("CARGO_BIN_EXE_repoll"));
    serve.args(["serve", "--sim", "--workers", "0"]);
    common(&mut serve);
    serve
        .env("REPOLL_ADDR", format!("127.0.0.1:{web_port}"))
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_ADMIN_PASSWORD", PASSWORD)
        .env("REPOLL_FIRST_ANSWER_MS", "0");
    procs.children.push(serve.spawn().expect("repoll serve"));
    let mut worker = Command::new(env!("CARGO_BIN_EXE_repoll"));
    worker.arg("worker");
    common(&mut worker);
    // Only a wake-up can start the task in time (the idle safety net is a minute): the
    // worker's BLPOP connection starts at a seed and must follow MOVED to the slot's owner.
    worker
        .env("REPOLL_MAX_IDLE_MS", "60000")
        .env("REPOLL_POLL_INTERVAL_MS", "100");
    procs.children.push(worker.spawn().expect("repoll worker"));

    let base = format!("http://127.0.0.1:{web_port}");
    let http = reqwest::Client::new();
    wait_for("readyz", Duration::from_secs(30), async || {
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
    // The worker registers with a heartbeat; give it the time to subscribe before submitting.
    tokio::time::sleep(Duration::from_millis(500)).await;

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

    // An admin signs in (session, sign-in counter) and acts (audit log).
    let sign_in_url = format!("{base}{}", app::pages::admin::login::SignIn::PATH);
    let password = format!("password={}", PASSWORD.replace(' ', "+"));
    let signed = post_form(&http, &sign_in_url, password, None).await;
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
    let acted = post_form(&http, &act_url, "op=pause".into(), Some(&cookie)).await;
    assert!(acted.status().is_success(), "{}", acted.status());
    // A wrong password too, so the sign-in counter exists.
    post_form(&http, &sign_in_url, "password=wrong".into(), None).await;

    // Every key on the slot's owner, in the queue's slot; nothing anywhere else.
    let mut all_keys = Vec::new();
    for port in &ports {
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
    for (port, key) in &all_keys {
        assert!(key.starts_with(&tag), "key outside the queue's tag: {key}");
        assert_eq!(*port, owner, "{key} on another node");
    }
}
