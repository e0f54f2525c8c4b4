//! The kit's redis-server spawner against real servers: every option reaches the server and
//! a failure carries the server's log.

use std::time::{Duration, Instant};

use testkit::{RedisOptions, RedisServer};

async fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut server.connection().await)
        .await
        .unwrap()
}

async fn set(server: &RedisServer, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
}

async fn config_get(server: &RedisServer, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
    pair.get(1).cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_plain_server_has_no_persistence_and_stops_on_drop() {
    let server = RedisServer::start();
    let port = server.port;
    assert_eq!(config_get(&server, "appendonly").await, "no");
    assert_eq!(config_get(&server, "save").await, "");
    assert_eq!(config_get(&server, "bind").await, "127.0.0.1");
    let dir = server.dir.clone();
    drop(server);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server is gone after drop"
    );
    assert!(!dir.exists(), "its directory is removed");
}

#[tokio::test]
async fn an_aof_server_keeps_its_writes_over_a_kill_and_restart_on_the_same_port() {
    let mut server = RedisServer::start_async(RedisOptions::default().aof("always"))
        .await
        .unwrap();
    let port = server.port;
    set(&server, "k", "v").await;
    server.restart_async().await.unwrap();
    assert_eq!(server.port, port);
    assert_eq!(get(&server, "k").await.as_deref(), Some("v"));
    assert_eq!(config_get(&server, "appendfsync").await, "always");
}

#[tokio::test]
async fn a_plain_server_loses_its_writes_on_restart() {
    let mut server = RedisServer::start();
    set(&server, "k", "v").await;
    server.restart().unwrap();
    assert_eq!(get(&server, "k").await, None);
}

#[tokio::test]
async fn a_password_is_required_and_in_the_url() {
    let server = RedisServer::start_with(RedisOptions::default().password("s3cret")).unwrap();
    assert!(server.url().contains(":s3cret@"));
    set(&server, "k", "v").await;
    let anonymous = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port))
        .unwrap()
        .get_multiplexed_async_connection()
        .await;
    let refused = match anonymous {
        Err(e) => e.to_string(),
        Ok(mut c) => redis::cmd("GET")
            .arg("k")
            .query_async::<Option<String>>(&mut c)
            .await
            .unwrap_err()
            .to_string(),
    };
    assert!(refused.contains("NOAUTH"), "{refused}");
}

#[tokio::test]
async fn an_acl_user_gets_exactly_its_rules() {
    let server = RedisServer::start_with(RedisOptions::default().acl_user(
        "qonly",
        "pw",
        "~{mine}* &* +@all",
    ))
    .unwrap();
    assert!(server.url().starts_with("redis://qonly:pw@"));
    set(&server, "{mine}:a", "1").await;
    let denied = redis::cmd("SET")
        .arg("{theirs}:a")
        .arg("1")
        .query_async::<()>(&mut server.connection().await)
        .await
        .unwrap_err();
    assert_eq!(
        denied.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
        "{denied}"
    );
}

#[tokio::test]
async fn a_stalled_server_answers_only_after_sigcont() {
    let server = RedisServer::start();
    let mut c = server.connection().await;
    server.signal(libc::SIGSTOP);
    let stalled = tokio::time::timeout(
        Duration::from_millis(300),
        redis::cmd("PING").query_async::<String>(&mut c),
    )
    .await;
    assert!(stalled.is_err(), "a stopped server does not answer");
    server.signal(libc::SIGCONT);
    let pong: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn a_taken_port_is_an_error_with_the_servers_log() {
    let first = RedisServer::start();
    let t0 = Instant::now();
    let err = RedisServer::start_on(first.port, RedisOptions::default())
        .err()
        .expect("a second server on a taken port fails");
    assert!(err.contains("Address already in use"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(60), "hang guard");
}

#[test]
fn a_bad_flag_is_an_error_with_the_servers_log() {
    let err = RedisServer::start_with(RedisOptions::default().with_args("--no-such-flag 1"))
        .err()
        .expect("an unknown flag stops the start");
    assert!(err.contains("no-such-flag"), "{err}");
}

#[tokio::test]
async fn a_cluster_has_its_masters_and_linked_replicas() {
    let cluster = testkit::Cluster::start(3, 1, 1000).await;
    assert_eq!(cluster.nodes.len(), 6);
    let mut masters = 0;
    for port in cluster.ports() {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut testkit::cluster::node_conn(port).await)
            .await
            .unwrap();
        if info.contains("role:master") {
            masters += 1;
        } else {
            assert!(info.contains("master_link_status:up"), "{info}");
        }
    }
    assert_eq!(masters, 3);
}

#[test]
fn a_guarded_child_and_its_group_are_killed_on_drop() {
    // A shell in its own group with a child of its own: both must go with the guard.
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "sleep 300 & echo $! ; wait"])
        .stdout(std::process::Stdio::piped());
    let mut guard = testkit::ChildGuard::spawn_group(cmd).unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(guard.child_mut().stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let grandchild: i32 = line.trim().parse().unwrap();
    let shell = i32::try_from(guard.id()).unwrap();
    // SAFETY: kill(pid, 0) only checks that the process exists.
    let alive = |pid: i32| unsafe { libc::kill(pid, 0) } == 0;
    assert!(alive(shell) && alive(grandchild));
    drop(guard);
    // The shell is reaped by the guard; the grandchild, orphaned, is reaped by init, which
    // may take a moment (a hang guard, not a speed assertion).
    let t0 = Instant::now();
    while alive(grandchild) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the group's other process survived the guard"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(shell), "the guarded child survived its guard");
}
