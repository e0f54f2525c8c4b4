//! The real `repoll` binary as a process: managed Redis start-up, SIGTERM drain, and no
//! redis-server child left behind.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_ready(port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(body) = http_get(port, "/readyz") {
            if body.starts_with("HTTP/1.1 200") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A minimal HTTP/1.1 GET so this test needs no client crate or async runtime.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// One request on its own connection; the connection, after the request is written.
fn send(port: u16, request: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s
}

/// Reads until `needle` has arrived (panics if the connection ends first); all read so far.
fn read_until(s: &mut std::net::TcpStream, needle: &str) -> String {
    use std::io::Read;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let n = s.read(&mut buf).expect("read (30 s hang guard)");
        assert!(
            n > 0,
            "ended before {needle:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// Whether the server ended the connection (end of stream or reset) within 30 s, a hang guard
/// (heartbeat comments keep an open stream talking, so this is a deadline, not a read
/// timeout).
fn closed_by_server(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + Duration::from_secs(30);
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// SIGTERM while a live stream is open: a stream never ends by itself, so only the drain's
/// grace period (`REPOLL_SHUTDOWN_GRACE_MS`) can end it. The server must close the stream,
/// exit 0 and take its managed redis-server with it. Deadlines here are hang guards (30 s
/// each, against a 1 s grace), not measurements.
#[test]
fn serve_with_managed_redis_drains_within_its_grace_and_exits_zero_on_sigterm() {
    let web_port = free_port();
    let redis_port = free_port();
    let dir = std::env::temp_dir().join(format!("repoll-proc-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_repoll"))
        .arg("serve")
        .env_remove("REDIS_URL")
        .env("REPOLL_ADDR", format!("127.0.0.1:{web_port}"))
        .env("REPOLL_MANAGED_REDIS_PORT", redis_port.to_string())
        .env("REPOLL_MANAGED_REDIS_DIR", &dir)
        // No workers: the query stays processing, so its stream stays open.
        .env("REPOLL_WORKERS", "0")
        .env("REPOLL_SHUTDOWN_GRACE_MS", "1000")
        // Heartbeats on the stream while it waits: the client must not end it.
        .env("REPOLL_SSE_KEEPALIVE_MS", "500")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn repoll");
    assert!(
        wait_ready(web_port, Duration::from_secs(20)),
        "repoll serve became ready"
    );
    assert!(
        dir.join("appendonlydir").exists() || dir.join("appendonly.aof").exists(),
        "managed redis keeps an append-only file in its data dir"
    );

    let body = r#"{"query":"sigterm stream"}"#;
    let mut submit = send(
        web_port,
        &format!(
            "POST /api/v1/queries HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    let answer = read_until(&mut submit, "\"id\":\"");
    let id: String = answer
        .split("\"id\":\"")
        .nth(1)
        .map(|rest| rest.chars().take(32).collect())
        .unwrap();
    let mut stream = send(
        web_port,
        &format!("GET /api/v1/queries/{id}/events HTTP/1.1\r\nhost: x\r\n\r\n"),
    );
    let first = read_until(&mut stream, "event: state");
    assert!(first.contains("processing"), "{first}");

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    if !closed_by_server(&mut stream) {
        let _ = child.kill();
        panic!("the open stream was not closed after SIGTERM (30 s hang guard)");
    }
    let sent = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("repoll serve did not exit after SIGTERM (30 s hang guard)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", redis_port)).is_err(),
        "managed redis-server is gone"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_without_redis_server_on_path_says_how_to_install_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_repoll"))
        .arg("serve")
        .env_remove("REDIS_URL")
        .env("REPOLL_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("PATH", "/nonexistent")
        .env(
            "REPOLL_MANAGED_REDIS_DIR",
            std::env::temp_dir().join("repoll-nopath"),
        )
        .output()
        .expect("run repoll");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("redis-server"), "{stderr}");
    assert!(
        stderr.contains("apt-get install -y redis-server"),
        "{stderr}"
    );
}

#[test]
fn help_documents_every_setting_with_its_environment_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_repoll"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for var in [
        "REDIS_URL",
        "REPOLL_QUEUE",
        "REPOLL_ADDR",
        "LEPTOS_SITE_ROOT",
    ] {
        assert!(help.contains(var), "{var} missing from help:\n{help}");
    }
}

#[test]
fn config_file_sets_defaults_and_its_mistakes_stop_the_start() {
    let dir = std::env::temp_dir().join(format!("repoll-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "queue = \"from-config-file\"\n[upstream]\ntimeout_ms = 4321\n",
    )
    .unwrap();
    // `--help` shows the effective defaults, the file's included.
    let out = Command::new(env!("CARGO_BIN_EXE_repoll"))
        .args(["serve", "--help", "--config"])
        .arg(&good)
        .env_remove("REPOLL_QUEUE")
        .env_remove("REPOLL_UPSTREAM_TIMEOUT_MS")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[default: from-config-file]"), "{help}");
    assert!(help.contains("[default: 4321]"), "{help}");
    // The variable names the file as well as the flag does.
    let out = Command::new(env!("CARGO_BIN_EXE_repoll"))
        .args(["worker", "--help"])
        .env("REPOLL_CONFIG", &good)
        .env_remove("REPOLL_QUEUE")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("[default: from-config-file]"));

    // A typo is an error before anything starts, naming the key; so is a missing file.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "upstream_timeout = 5\n").unwrap();
    for (file, words) in [
        (&bad, "unknown setting `upstream_timeout`"),
        (&dir.join("missing.toml"), "cannot read config file"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_repoll"))
            .args(["serve", "--config"])
            .arg(file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(words), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `cmd` to its end, killing it after `limit` (a hang guard: the caller's point is that
/// it ends well before).
fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run repoll");
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn a_worker_needs_redis_url() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.arg("worker").env_remove("REDIS_URL");
    let out = output_within(cmd, Duration::from_secs(20));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs REDIS_URL"), "{stderr}");
}

#[test]
fn a_wrong_redis_password_stops_the_start_at_once_and_is_never_printed() {
    // A Redis with a password; the worker is given another. Waiting for Redis (up to 30 s) is
    // for a server that is down or loading, not for one that refuses us: the worker must stop
    // long before that wait would end.
    let port = free_port();
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--requirepass", "the-right-one"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.arg("worker").env(
        "REDIS_URL",
        format!("redis://:not-the-password@127.0.0.1:{port}/"),
    );
    let out = output_within(cmd, Duration::from_secs(20));
    let _ = redis.kill();
    let _ = redis.wait();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.to_lowercase().contains("auth") || stderr.contains("WRONGPASS"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"), "{stderr}");
}

#[test]
fn hash_password_makes_a_hash_that_signs_in() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_repoll"))
        .args(["admin", "hash-password"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run repoll");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"correct horse\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(hash.starts_with("$argon2"), "{hash}");
    assert!(!hash.contains("correct horse"));
    // The hash is what REPOLL_ADMIN_PASSWORD_HASH takes, and it accepts that password only.
    let secret = app::auth::Credential::from_settings(Some(&hash), None)
        .expect("a PHC string")
        .expect("a secret");
    assert!(secret.verify("correct horse"));
    assert!(!secret.verify("correct horse "));
}
