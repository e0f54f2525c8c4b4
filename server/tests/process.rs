//! The real `repoll` binary as a process: managed Redis start-up, SIGTERM drain, and no
//! redis-server child left behind.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use testkit::http::{Answer, BlockingHttp};
use testkit::{free_port, ChildGuard, RedisOptions, RedisServer};

/// Whether `GET /readyz` on `port` answered 200 within `limit`.
fn wait_ready(port: u16, limit: Duration) -> bool {
    BlockingHttp::local(port).wait_ok("/readyz", limit)
}

/// `GET path` on `port`: the answer, or the transport error (nothing listening yet).
fn http_get(port: u16, path: &str) -> reqwest::Result<Answer> {
    let http = BlockingHttp::local(port);
    http.try_send(http.client.get(http.url(path)))
}

/// `repoll serve` on `web_port` with a managed redis-server on `redis_port` keeping its data
/// in `dir` (never a `REDIS_URL` from the environment).
fn serve_managed_command(web_port: u16, redis_port: u16, dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.arg("serve")
        .env_remove("REDIS_URL")
        .env("REPOLL_ADDR", format!("127.0.0.1:{web_port}"))
        .env("REPOLL_MANAGED_REDIS_PORT", redis_port.to_string())
        .env("REPOLL_MANAGED_REDIS_DIR", dir);
    cmd
}

/// Submits `query` to `POST /api/v1/queries`; its task id.
fn submit_query(web_port: u16, query: &str) -> String {
    let answer = BlockingHttp::local(web_port)
        .post_json("/api/v1/queries", &serde_json::json!({ "query": query }));
    id_in(&answer)
}

/// The task id of an answer to `POST /api/v1/queries` (panics with the answer if none).
fn id_in(answer: &Answer) -> String {
    answer.json()["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {answer:?}"))
        .to_string()
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

/// The drain period this test sets: 6 s, four times the 1.5 s default, so a server that
/// ignored the setting (and drained for the default) closes the stream well before it.
const TEST_GRACE: Duration = Duration::from_secs(6);
/// What the test asserts of the stream's close after SIGTERM: no earlier than this. A lower
/// bound, so a slow machine cannot fail it; the default grace (1.5 s) would.
const NOT_BEFORE: Duration = Duration::from_secs(5);

/// SIGTERM while a live stream is open: a stream never ends by itself, so only the drain's
/// grace period (`REPOLL_SHUTDOWN_GRACE_MS`) can end it. The stream must stay open for the
/// configured 6 s (at least [`NOT_BEFORE`] after the signal was sent: the 1.5 s default
/// would have closed it), then the server must close it, exit 0 and take its managed
/// redis-server with it. The 30 s deadlines are hang guards against a server that never
/// ends the drain, not measurements.
#[test]
fn serve_with_managed_redis_drains_within_its_grace_and_exits_zero_on_sigterm() {
    let web_port = free_port();
    let redis_port = free_port();
    let dir = std::env::temp_dir().join(format!("repoll-proc-{}", std::process::id()));
    let mut child = Reaped(vec![ChildGuard::adopt(
        serve_managed_command(web_port, redis_port, &dir)
            // No workers: the query stays processing, so its stream stays open.
            .env("REPOLL_WORKERS", "0")
            .env(
                "REPOLL_SHUTDOWN_GRACE_MS",
                TEST_GRACE.as_millis().to_string(),
            )
            // Heartbeats on the stream while it waits: the client must not end it.
            .env("REPOLL_SSE_KEEPALIVE_MS", "500")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn repoll"),
    )]);
    assert!(
        wait_ready(web_port, Duration::from_secs(20)),
        "repoll serve became ready"
    );
    assert!(
        dir.join("appendonlydir").exists() || dir.join("appendonly.aof").exists(),
        "managed redis keeps an append-only file in its data dir"
    );

    let id = submit_query(web_port, "sigterm stream");
    let mut stream = send(
        web_port,
        &format!("GET /api/v1/queries/{id}/events HTTP/1.1\r\nhost: x\r\n\r\n"),
    );
    let first = read_until(&mut stream, "event: state");
    assert!(first.contains("processing"), "{first}");

    let sent = Instant::now();
    let kill = Command::new("kill")
        .args(["-TERM", &child.0[0].id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(
        closed_by_server(&mut stream),
        "the open stream was not closed after SIGTERM (30 s hang guard)"
    );
    let closed_after = sent.elapsed();
    assert!(
        closed_after >= NOT_BEFORE,
        "the stream was closed {closed_after:?} after SIGTERM: the {TEST_GRACE:?} grace was not \
         used (the default is 1.5 s)"
    );
    let status = loop {
        if let Some(status) = child.0[0].child_mut().try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "repoll serve did not exit after SIGTERM (30 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("SIGTERM: stream closed after {closed_after:?}, exit {status} (grace {TEST_GRACE:?})");
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

/// A plain `redis-server` (the test kit's: no persistence) on `port` exactly, with `args`
/// added, once it answers; killed when dropped.
fn spawn_redis(port: u16, args: &[&str]) -> RedisServer {
    let opts = RedisOptions {
        extra: args.iter().map(|a| a.to_string()).collect(),
        ..RedisOptions::default()
    };
    // The readiness check authenticates with the password the test gave.
    let opts = match args.iter().position(|a| *a == "--requirepass") {
        Some(i) => {
            let mut extra = opts.extra.clone();
            let pair: Vec<String> = extra.drain(i..i + 2).collect();
            RedisOptions {
                password: Some(pair[1].clone()),
                extra,
                ..opts
            }
        }
        None => opts,
    };
    RedisServer::start_on(port, opts).unwrap_or_else(|e| panic!("{e}"))
}

/// The test's `repoll` processes (the kit's guards), killed however the test ends.
#[derive(Default)]
struct Reaped(Vec<ChildGuard>);

#[test]
fn a_wrong_redis_password_stops_the_start_at_once_and_is_never_printed() {
    // A Redis with a password; the worker is given another. Waiting for Redis (up to 30 s) is
    // for a server that is down or loading, not for one that refuses us: the worker must stop
    // long before that wait would end.
    let port = free_port();
    let _redis = spawn_redis(port, &["--requirepass", "the-right-one"]);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.arg("worker").env(
        "REDIS_URL",
        format!("redis://:not-the-password@127.0.0.1:{port}/"),
    );
    let out = output_within(cmd, Duration::from_secs(20));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.to_lowercase().contains("auth") || stderr.contains("WRONGPASS"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"), "{stderr}");
}

/// A URL that cannot name a Redis (another scheme, a port that is not a number) is a
/// mistake no wait can fix: `serve` and `worker` stop well inside the 30 s wait for a Redis
/// that is down (the 20 s limit is a hang guard), say why, and never print the password in
/// it.
#[test]
fn a_wrong_redis_url_stops_the_start_at_once_and_hides_its_password() {
    for url in [
        format!("http://:url-secret@127.0.0.1:{}/", free_port()),
        "redis://:url-secret@127.0.0.1:not-a-port/".to_string(),
    ] {
        for command in ["serve", "worker"] {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
            cmd.arg(command)
                .env("REDIS_URL", &url)
                .env("REPOLL_ADDR", format!("127.0.0.1:{}", free_port()))
                .env("REPOLL_WORKERS", "0")
                .env("REPOLL_ADMIN_PASSWORD", "not printed")
                .env("RUST_LOG", "warn");
            let out = output_within(cmd, Duration::from_secs(20));
            assert!(!out.status.success(), "{command} {url}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stderr.contains("cannot connect to Redis"),
                "{command} {url}: {stderr}"
            );
            assert!(
                !stderr.contains("url-secret") && !stdout.contains("url-secret"),
                "{command} {url}: {stderr}{stdout}"
            );
        }
    }
}

/// A child whose stdout and stderr are collected, line by line, while it runs (the logs go
/// to stdout, `eprintln!` to stderr); killed however the test ends.
struct Logged {
    child: std::process::Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Logged {
    fn spawn(mut cmd: Command) -> Logged {
        use std::io::{BufRead, BufReader, Read};
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn repoll");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for pipe in pipes {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        Logged { child, log }
    }

    fn text(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits for a line for which `wanted` holds (panics after `limit`, a hang guard, or if
    /// the process ends first); that line.
    fn wait_line(&mut self, limit: Duration, wanted: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(line) = self.text().lines().find(|l| wanted(l)) {
                return line.to_string();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                // The readers may still hold the last lines.
                std::thread::sleep(Duration::from_millis(200));
                panic!("exited ({status}) before the line came:\n{}", self.text());
            }
            assert!(
                t0.elapsed() < limit,
                "no such line within {limit:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status (30 s hang guard).
    fn terminate(&mut self) -> std::process::ExitStatus {
        let kill = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no exit after SIGTERM (30 s hang guard)"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `repoll serve` on `REDIS_URL` = `url`, web only, listening on `web_port`; the admin
/// password is left to the caller (none configured here).
fn serve_command(url: &str, web_port: u16) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.arg("serve")
        .env("REDIS_URL", url)
        .env("REPOLL_ADDR", format!("127.0.0.1:{web_port}"))
        .env("REPOLL_WORKERS", "0")
        .env("RUST_LOG", "warn");
    for var in [
        "REPOLL_CONFIG",
        "REPOLL_ADMIN_PASSWORD",
        "REPOLL_ADMIN_PASSWORD_HASH",
        "REPOLL_VIEWER_PASSWORD",
        "REPOLL_VIEWER_PASSWORD_HASH",
        "REPOLL_TRUST_FORWARDED",
        "REPOLL_TRUST_FORWARDED_FOR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Stands in for a Redis that is still loading its append-only file: the connection's own
/// set-up (AUTH, SELECT, CLIENT) is answered as a real loading Redis does, every other
/// command with `-LOADING`. Stops (closing its port and connections) when dropped.
struct LoadingRedis {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl LoadingRedis {
    fn start(port: u16) -> LoadingRedis {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
        listener.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let accept = std::thread::spawn(move || {
            let mut conns = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let flag = flag.clone();
                        conns.push(std::thread::spawn(move || loading_conn(conn, &flag)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            drop(listener);
            for c in conns {
                let _ = c.join();
            }
        });
        LoadingRedis {
            stop,
            accept: Some(accept),
        }
    }
}

impl Drop for LoadingRedis {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn loading_conn(mut conn: std::net::TcpStream, stop: &std::sync::atomic::AtomicBool) {
    use std::io::{Read, Write};
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        match conn.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        while let Some(args) = take_command(&mut buf) {
            let name = args
                .first()
                .map(|a| a.to_ascii_uppercase())
                .unwrap_or_default();
            let reply: &[u8] = match name.as_str() {
                "AUTH" | "SELECT" | "CLIENT" => b"+OK\r\n",
                _ => b"-LOADING Redis is loading the dataset in memory\r\n",
            };
            if conn.write_all(reply).is_err() {
                return;
            }
        }
    }
}

/// The first whole RESP command (an array of bulk strings) in `buf`, removed from it.
fn take_command(buf: &mut Vec<u8>) -> Option<Vec<String>> {
    fn line(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = at + b.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&b[at..end], end + 2))
    }
    fn number(b: &[u8], prefix: u8) -> Option<usize> {
        std::str::from_utf8(b.strip_prefix(&[prefix])?)
            .ok()?
            .parse()
            .ok()
    }
    let (head, mut at) = line(buf, 0)?;
    let n = number(head, b'*')?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, start) = line(buf, at)?;
        let len = number(len, b'$')?;
        let bytes = buf.get(start..start + len)?;
        args.push(String::from_utf8_lossy(bytes).into_owned());
        at = start + len + 2;
        if buf.len() < at {
            return None;
        }
    }
    buf.drain(..at);
    Some(args)
}

/// `serve` started while its Redis is still loading its data, and then while it is down,
/// waits (up to 30 s) instead of exiting, and serves once Redis answers. Each phase is
/// followed by its own "retrying" log line (events, not sleeps); the deadlines are hang
/// guards. Fails if `serve` stops waiting for either kind of error.
#[test]
fn serve_started_before_its_redis_waits_while_it_loads_or_is_down() {
    let port = free_port();
    let web_port = free_port();
    let loading = LoadingRedis::start(port);
    let mut serve = Logged::spawn(serve_command(
        &format!("redis://:early-pw@127.0.0.1:{port}/"),
        web_port,
    ));
    let retrying = |l: &str| l.contains("Redis not available yet; retrying");
    serve.wait_line(Duration::from_secs(20), |l| {
        retrying(l) && l.contains("BusyLoading")
    });
    // Down: nothing listens on the port any more.
    drop(loading);
    let seen = serve.text().lines().filter(|l| retrying(l)).count();
    serve.wait_line(Duration::from_secs(20), |l| {
        retrying(l) && !l.contains("BusyLoading")
    });
    assert!(
        serve.text().lines().filter(|l| retrying(l)).count() > seen,
        "a retry after the port closed"
    );
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "serve is still waiting"
    );
    let _redis = spawn_redis(port, &["--requirepass", "early-pw"]);
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "serve became ready once Redis answered:\n{}",
        serve.text()
    );
    assert!(serve.terminate().success());
    assert!(!serve.text().contains("early-pw"), "{}", serve.text());
}

/// A form POST as a page script sends it, with `headers` (name, value).
fn http_post_form(port: u16, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    BlockingHttp::local(port).post_form(path, headers, body)
}

/// A page GET (`accept: text/html`) with `headers` (name, value).
fn http_get_with(port: u16, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut all = vec![("accept", "text/html")];
    all.extend_from_slice(headers);
    BlockingHttp::local(port).get_with(path, &all)
}

/// `serve` with no admin password configured prints a random one for the run: that one
/// signs in, nothing else does, and the dashboard is closed to anonymous visitors. Also the
/// API's former trust setting, `REPOLL_TRUST_FORWARDED_FOR`: still read (each sign-in's
/// client is the last `X-Forwarded-For` entry, so one address's used-up attempts do not
/// refuse another), with a warning to rename it.
#[test]
fn without_an_admin_password_serve_prints_one_for_the_run_and_reads_the_old_trust_setting() {
    use leptos::server_fn::ServerFn;
    let redis_port = free_port();
    let web_port = free_port();
    let _redis = spawn_redis(redis_port, &[]);
    let mut cmd = serve_command(&format!("redis://127.0.0.1:{redis_port}/"), web_port);
    cmd.env("REPOLL_TRUST_FORWARDED_FOR", "true")
        .env("REPOLL_LOGIN_MAX_FAILURES", "1")
        .env("REPOLL_QUEUE", "generated-pw");
    let mut serve = Logged::spawn(cmd);
    let line = serve.wait_line(Duration::from_secs(20), |l| {
        l.contains("admin password for this run: ")
    });
    let password = line
        .split("admin password for this run: ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    assert!(password.len() >= 16, "{line}");
    serve.wait_line(Duration::from_secs(20), |l| {
        l.contains("REPOLL_TRUST_FORWARDED_FOR is replaced by REPOLL_TRUST_FORWARDED")
    });
    assert!(wait_ready(web_port, Duration::from_secs(20)), "ready");

    // Anonymous: the dashboard is a redirect to the sign-in page.
    let page = http_get_with(web_port, "/admin", &[]);
    assert_eq!(page.status, 303, "{page:?}");
    assert_eq!(page.header("location"), Some("/admin/login"), "{page:?}");

    let path = app::pages::admin::login::SignIn::PATH;
    let encoded: String = password
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    // An empty password and a wrong one are refused; the wrong one uses up the one attempt
    // of 198.51.100.1 (max 1 per minute), which is refused from then on...
    for (who, password) in [("198.51.100.9", ""), ("198.51.100.1", "admin")] {
        let reply = http_post_form(
            web_port,
            path,
            &[("x-forwarded-for", who)],
            &format!("password={password}"),
        );
        assert_eq!(reply.status, 401, "{reply:?}");
    }
    let reply = http_post_form(
        web_port,
        path,
        &[("x-forwarded-for", "198.51.100.1")],
        &format!("password={encoded}"),
    );
    assert_eq!(reply.status, 429, "{reply:?}");
    // ...while the printed password signs in from another forwarded address (the same TCP
    // peer: only the trusted header tells them apart).
    let reply = http_post_form(
        web_port,
        path,
        &[("x-forwarded-for", "198.51.100.1, 198.51.100.2")],
        &format!("password={encoded}"),
    );
    assert!((200..400).contains(&reply.status), "{reply:?}");
    let cookie = reply
        .cookies()
        .iter()
        .filter_map(|c| c.strip_prefix("repoll_session="))
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("a session cookie: {reply:?}"));
    let page = http_get_with(
        web_port,
        "/admin",
        &[("cookie", &format!("repoll_session={cookie}"))],
    );
    assert_eq!(page.status, 200, "{page:?}");
    assert!(serve.terminate().success());
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

/// A simulator flag out of range stops `repoll sim` at once with a message naming it, before
/// anything listens (clap validates the range; `sim/src/lib.rs` unit tests cover each knob).
#[test]
fn a_simulator_flag_out_of_range_stops_the_start() {
    for (flag, value) in [("--sim-max-keys", "0"), ("--sim-max-keys", "100001")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
        cmd.args(["sim", "--addr", "127.0.0.1:0", flag, value]);
        let out = output_within(cmd, Duration::from_secs(20));
        assert!(!out.status.success(), "{flag} {value} started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

/// `/metrics` of `repoll serve` (in-process workers and simulator) carries every metric the
/// README names once a query has completed and one has failed: the counters that have not
/// counted yet are there at 0.
#[test]
fn metrics_carry_every_named_series() {
    let web_port = free_port();
    let redis_port = free_port();
    let sim_port = free_port();
    let dir = std::env::temp_dir().join(format!("repoll-metrics-{}", std::process::id()));
    let mut child = serve_managed_command(web_port, redis_port, &dir)
        .env("REPOLL_SIM", "true")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
        )
        .env("REPOLL_POLL_INTERVAL_MS", "100")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn repoll");
    let stop = |child: &mut std::process::Child| {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while child.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = std::fs::remove_dir_all(&dir);
    };
    if !wait_ready(web_port, Duration::from_secs(30)) {
        stop(&mut child);
        panic!("repoll serve became ready (30 s hang guard)");
    }
    let ids = [
        submit_query(web_port, "metrics done polls=1"),
        submit_query(web_port, "metrics failed status=failed"),
    ];
    let t0 = Instant::now();
    let settled = |id: &str| {
        http_get(web_port, &format!("/api/v1/queries/{id}")).is_ok_and(|r| {
            r.body.contains("\"status\":\"done\"") || r.body.contains("\"status\":\"failed\"")
        })
    };
    while !ids.iter().all(|id| settled(id)) {
        if t0.elapsed() > Duration::from_secs(60) {
            stop(&mut child);
            panic!("the queries did not settle (60 s hang guard)");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The gauges of queue depth are refreshed periodically: wait for them too.
    let mut page = String::new();
    let wanted = [
        "repoll_claims_total",
        "repoll_completions_total",
        "repoll_polls_total",
        "repoll_failures_total{",
        "repoll_lease_expirations_total",
        "repoll_upstream_latency_seconds_bucket{",
        "repoll_in_flight",
        "repoll_queue_depth{state=",
        "repoll_breaker_open{upstream=\"default\"} 0",
        "repoll_live_streams",
        "repoll_connections_refused_total",
    ];
    while t0.elapsed() < Duration::from_secs(90) {
        page = http_get(web_port, "/metrics")
            .map(|a| a.body)
            .unwrap_or_default();
        if wanted.iter().all(|w| page.contains(w)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(&mut child);
    for w in wanted {
        assert!(page.contains(w), "{w} missing from /metrics:\n{page}");
    }
    // A worker's series carry its upstream (a process runs one worker per upstream).
    assert!(
        page.contains("repoll_completions_total{upstream=\"default\"} 1"),
        "{page}"
    );
}

/// `redis-cli -p port args...`: its output, trimmed.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// POSTs `body` (JSON text, sent as is) as `application/json`.
fn http_post_json(port: u16, path: &str, body: &str) -> Answer {
    let http = BlockingHttp::local(port);
    http.send(
        http.client
            .post(http.url(path))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
}

/// `repoll serve` on `url` with queue `queue`, 4 embedded worker slots, the simulator on
/// `sim_port`, no first-answer wait, and callbacks signed with `secret` to this web port.
fn serve_with_sim_and_callbacks(
    url: &str,
    queue: &str,
    web_port: u16,
    sim_port: u16,
    secret: &str,
) -> Command {
    let mut cmd = serve_command(url, web_port);
    cmd.env("REPOLL_QUEUE", queue)
        .env("REPOLL_WORKERS", "4")
        .env("REPOLL_SIM", "true")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_FIRST_ANSWER_MS", "0")
        .env("REPOLL_CALLBACK_SECRET", secret)
        .env(
            "REPOLL_CALLBACK_BASE_URL",
            format!("http://127.0.0.1:{web_port}"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Callbacks end the wait early: the simulator is done 1 s after the first call and calls
/// back then, while the poll interval is 60 s. The task must be done after exactly one poll
/// (the simulator counts its calls: a second poll would be a second call) and one callback.
/// Then every refused token — forged, replayed, another task's life, expired — is a 404 and
/// leaves Redis as it was. The time from submit to done is printed (the closing note's
/// figure); the 30 s deadlines are hang guards under the 60 s poll, not speed assertions.
#[test]
fn a_callback_ends_the_wait_and_a_forged_replayed_or_expired_token_changes_nothing() {
    const SECRET: &str = "callback-secret-of-this-test-0123456789";
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let mut children = Reaped::default();
    let url = format!("redis://127.0.0.1:{redis_port}");
    let mut cmd = serve_with_sim_and_callbacks(&url, "cbq", web_port, sim_port, SECRET);
    cmd.env("REPOLL_SIM_MS", "1000")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}&callback={{callback_url}}"),
        )
        .env("REPOLL_POLL_INTERVAL_MS", "60000");
    children
        .0
        .push(ChildGuard::adopt(cmd.spawn().expect("spawn repoll")));
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "serve not ready"
    );

    let t0 = Instant::now();
    let id = submit_query(web_port, "callback-one");
    let done = loop {
        let body = http_get(web_port, &format!("/api/v1/queries/{id}"))
            .unwrap()
            .body;
        if body.contains(r#""status":"done""#) {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not done by the callback (30 s hang guard; the 2nd poll is due at 60 s): {body}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    println!(
        "callback: submit to done in {} ms (upstream done after 1000 ms, poll interval 60 s)",
        done.as_millis()
    );
    let sim = http_get(sim_port, "/_sim/key?q=callback-one").unwrap().body;
    assert!(sim.contains(r#""calls":1,"#), "one poll only: {sim}");
    assert!(sim.contains(r#""callbacks":1"#), "one callback: {sim}");
    let result_key = format!("{{cbq}}:r:{id}");
    let result = redis_cli(redis_port, &["GET", &result_key]);
    assert!(
        result.contains("callback") && result.contains(r#""progress":1.0"#),
        "{result}"
    );

    // The tokens, made with the deployment's own key (a test may know it; an attacker not).
    let created: i64 = result.split(',').nth(1).unwrap().parse().unwrap();
    let signer = worker::Callbacks::new(&worker::CallbackArgs {
        base_url: None,
        secret: Some(worker::Secret::from(SECRET)),
    })
    .unwrap()
    .unwrap();
    let final_body = r#"{"status":"done","data":{"forged":true}}"#;
    let post =
        |token: &str| http_post_json(web_port, &format!("/api/v1/callbacks/{token}"), final_body);
    // A second task, still processing (done in an hour): the target of the refused tokens.
    let other = submit_query(web_port, "callback-two ms=3600000");
    let other_key = format!("{{cbq}}:t:{other}");
    let t1 = Instant::now();
    while redis_cli(redis_port, &["HGET", &other_key, "p"]) != "1" {
        assert!(
            t1.elapsed() < Duration::from_secs(30),
            "the second task was not polled (30 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let other_created: i64 = redis_cli(redis_port, &["HGET", &other_key, "c"])
        .parse()
        .unwrap();
    let before = (
        redis_cli(redis_port, &["HGETALL", &other_key]),
        redis_cli(redis_port, &["GET", &result_key]),
        redis_cli(redis_port, &["DBSIZE"]),
    );
    let refused = [
        (
            "forged",
            format!("{other}.{other_created}.0.{}", "ab".repeat(32)),
        ),
        ("wrong key", {
            let other_signer = worker::Callbacks::new(&worker::CallbackArgs {
                base_url: None,
                secret: Some(worker::Secret::from("x".repeat(40).as_str())),
            })
            .unwrap()
            .unwrap();
            other_signer.token(&other, other_created, 0)
        }),
        ("replayed", signer.token(&id, created, 0)),
        ("another life", signer.token(&other, other_created - 1, 0)),
        (
            "expired",
            signer.token(&other, other_created, other_created + 1),
        ),
        ("garbage", "not-a-token".to_string()),
    ];
    for (what, token) in &refused {
        let answer = post(token);
        assert_eq!(answer.status, 404, "{what}: {answer:?}");
    }
    let after = (
        redis_cli(redis_port, &["HGETALL", &other_key]),
        redis_cli(redis_port, &["GET", &result_key]),
        redis_cli(redis_port, &["DBSIZE"]),
    );
    assert_eq!(before, after, "a refused callback changed Redis");
    // The right token for the live task: done at once, and a second use is refused.
    let good = signer.token(&other, other_created, 0);
    let answer = post(&good);
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["completed"], true, "{answer:?}");
    assert_eq!(post(&good).status, 404, "a used token");
    let stored = redis_cli(redis_port, &["GET", &format!("{{cbq}}:r:{other}")]);
    assert!(stored.ends_with(r#"{"forged":true}"#), "{stored}");
}

/// Named upstreams (`[upstreams.<name>]` in the config file): one `repoll serve` runs a worker
/// per upstream; the same text sent to two upstreams is two tasks with two ids, each finished
/// by its own upstream and stored under its own queue's hash tag; an unknown upstream is a 422
/// naming the known ones; a named upstream's callback completes its task (the token names the
/// upstream); the query page offers the choice; `repoll worker --upstream` refuses a name that
/// does not exist.
#[test]
fn named_upstreams_have_their_own_queue_ids_workers_and_callbacks() {
    const SECRET: &str = "callback-secret-of-the-upstreams-test-0123";
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let mut children = Reaped::default();
    let url = format!("redis://127.0.0.1:{redis_port}");
    let dir = std::env::temp_dir().join(format!("repoll-upstreams-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("upstreams.toml");
    std::fs::write(
        &config,
        format!(
            "[upstreams.search]\n\
             url = \"http://127.0.0.1:{sim_port}/search/api/query?q={{key}}&polls=1&callback={{callback_url}}\"\n\
             poll_interval_ms = 10000\n\
             concurrency = 2\n"
        ),
    )
    .unwrap();
    let mut cmd = serve_with_sim_and_callbacks(&url, "nq", web_port, sim_port, SECRET);
    cmd.arg("--config")
        .arg(&config)
        // The simulator's second upstream, `search`, under /search with its own state.
        .env("REPOLL_SIM_UPSTREAMS", "search")
        .env(
            "REPOLL_UPSTREAM_URL",
            format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}"),
        )
        .env("REPOLL_POLL_INTERVAL_MS", "50");
    children
        .0
        .push(ChildGuard::adopt(cmd.spawn().expect("spawn repoll")));
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "serve not ready"
    );

    let post = |body: &str| http_post_json(web_port, "/api/v1/queries", body);
    let a = id_in(&post(r#"{"query":"same text"}"#));
    let b = id_in(&post(r#"{"query":"same text","upstream":"search"}"#));
    assert_ne!(a, b, "one text, two upstreams: two tasks");
    let unknown = post(r#"{"query":"x","upstream":"nope"}"#);
    assert_eq!(unknown.status, 422, "{unknown:?}");
    assert!(unknown.body.contains("unknown_upstream"), "{unknown:?}");
    assert!(
        unknown.body.contains("known: default, search"),
        "{unknown:?}"
    );

    let done = |id: &str| {
        let t0 = Instant::now();
        loop {
            let body = http_get(web_port, &format!("/api/v1/queries/{id}"))
                .unwrap()
                .body;
            if body.contains(r#""status":"done""#) {
                return body;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "not done: {body}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert!(done(&a).contains(r#""upstream":"default""#));
    let t0 = Instant::now();
    let c = id_in(&post(r#"{"query":"find-x ms=800","upstream":"search"}"#));
    // Its live stream (Pub/Sub of the named upstream's queue) brings the final state.
    let mut events = send(
        web_port,
        &format!(
            "GET /api/v1/queries/{c}/events HTTP/1.1\r\nhost: x\r\n\
             accept: text/event-stream\r\n\r\n"
        ),
    );
    let streamed = read_until(&mut events, r#""status":"done""#);
    assert!(streamed.contains(r#""upstream":"search""#), "{streamed}");
    assert!(done(&b).contains(r#""upstream":"search""#));
    let body_c = done(&c);
    let c_done = t0.elapsed();
    // Its page names the upstream.
    let page = http_get(web_port, &format!("/q/{c}")).unwrap().body;
    assert!(page.contains("via search"), "{page}");
    println!(
        "named upstream callback: done {} ms after the submit (poll interval 10 s)",
        c_done.as_millis()
    );
    assert!(body_c.contains(r#""upstream":"search""#), "{body_c}");

    // Each result under its own queue's hash tag; the sim saw each upstream's own key.
    assert_eq!(
        redis_cli(redis_port, &["EXISTS", &format!("{{nq}}:r:{a}")]),
        "1"
    );
    assert_eq!(
        redis_cli(redis_port, &["EXISTS", &format!("{{nq.search}}:r:{b}")]),
        "1"
    );
    assert_eq!(
        redis_cli(redis_port, &["EXISTS", &format!("{{nq}}:r:{b}")]),
        "0"
    );
    let sim = http_get(sim_port, "/_sim/stats").unwrap().body;
    assert!(sim.contains(r#""same text":{"calls":"#), "{sim}");
    assert!(!sim.contains("find-x"), "{sim}");
    let search = http_get(sim_port, "/search/_sim/stats").unwrap().body;
    assert!(
        search.contains(r#""same text":{"calls":1,"done":1}"#),
        "{search}"
    );
    let cb = http_get(sim_port, "/search/_sim/key?q=find-x%20ms%3D800")
        .unwrap()
        .body;
    assert!(cb.contains(r#""callbacks":1"#), "{cb}");
    assert!(
        cb.contains(r#""calls":1,"#),
        "one poll, then the callback: {cb}"
    );

    // The query page offers both upstreams.
    let page = http_get(web_port, "/").unwrap().body;
    assert!(page.contains(r#"data-testid="query-upstream""#), "{page}");
    assert!(page.contains(r#"<option value="search""#), "{page}");

    // A worker process for an upstream that does not exist does not start.
    let mut w = Command::new(env!("CARGO_BIN_EXE_repoll"));
    w.args(["worker", "--upstream", "nope", "--config"])
        .arg(&config)
        .env("REDIS_URL", &url)
        .env("REPOLL_QUEUE", "nq");
    let out = output_within(w, Duration::from_secs(20));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no such upstream") && stderr.contains("default, search"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `repoll admin repartition`: refused (exit 1, saying why) while a task is live; moves a
/// drained queue; a worker started with the old count afterwards refuses to start and says
/// which count the queue has.
#[test]
fn admin_repartition_moves_a_drained_queue_and_old_counts_are_refused() {
    let port = free_port();
    let _redis = spawn_redis(port, &[]);
    let url = format!("redis://127.0.0.1:{port}/");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = queue::QueueConfig {
        name: "rp".into(),
        ..queue::QueueConfig::default()
    };
    let q = rt
        .block_on(queue::Queue::connect(&url, cfg.clone()))
        .unwrap();
    rt.block_on(q.enqueue("repartition me", "", &Default::default()))
        .unwrap();
    let admin = |to: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
        cmd.args(["admin", "repartition", "--to", to])
            .env("REDIS_URL", &url)
            .env("REPOLL_QUEUE", "rp");
        output_within(cmd, Duration::from_secs(20))
    };
    let out = admin("4");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 tasks are live"), "{stderr}");

    let c = rt.block_on(q.claim("w", 1, 60_000)).unwrap().pop().unwrap();
    rt.block_on(q.complete(&c.id, c.token, "the answer", 1))
        .unwrap();
    let out = admin("4");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 -> 4 partitions; moved 1 stored results"),
        "{stdout}"
    );

    // The result is served by a handle of the new count.
    let four = rt
        .block_on(queue::Queue::connect(
            &url,
            queue::QueueConfig {
                partitions: 4,
                ..cfg
            },
        ))
        .unwrap();
    let r = rt.block_on(four.result_by_id(&c.id)).unwrap().unwrap();
    assert_eq!(r.data, "the answer");
    // A process with the old count stops at once and says why.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repoll"));
    cmd.arg("worker")
        .env("REDIS_URL", &url)
        .env("REPOLL_QUEUE", "rp");
    let out = output_within(cmd, Duration::from_secs(20));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has 4 partition(s)"), "{stderr}");
}

/// The soft and hard "Max open files" of process `pid`, from `/proc/<pid>/limits`.
fn nofile_of(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no Max open files in {limits}"));
    let mut fields = line["Max open files".len()..].split_whitespace();
    (
        fields.next().unwrap().to_string(),
        fields.next().unwrap().to_string(),
    )
}

/// `serve` started with a soft descriptor limit below its hard one (set between fork and
/// exec, as a shell's `ulimit -Sn` would) raises the soft limit to the hard one at start, so
/// the connection cap is not silently lowered to the soft limit − 256. Read from the running
/// process's `/proc/<pid>/limits` once it serves.
#[test]
fn serve_raises_its_soft_descriptor_limit_to_the_hard_one() {
    use std::os::unix::process::CommandExt;
    let mut ours = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut ours) },
        0
    );
    let hard = ours.rlim_max;
    // Low, but enough for serve (its cap is then 256 connections), and below the hard limit.
    let low = (hard / 2).min(1024);
    assert!(
        low >= 512 && low < hard,
        "this test needs a hard descriptor limit of at least 1,024 (it is {hard})"
    );
    let (web_port, redis_port) = (free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let mut children = Reaped::default();
    let mut cmd = serve_command(&format!("redis://127.0.0.1:{redis_port}/"), web_port);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and only reads the struct passed.
    unsafe {
        cmd.pre_exec(move || {
            let lowered = libc::rlimit {
                rlim_cur: low,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    children
        .0
        .push(ChildGuard::adopt(cmd.spawn().expect("spawn repoll")));
    let pid = children.0[0].id();
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "serve not ready (30 s hang guard)"
    );
    assert_eq!(
        nofile_of(pid),
        (hard.to_string(), hard.to_string()),
        "serve was started with a soft limit of {low}: it must run with soft = hard"
    );
}

/// The managed Redis's password, from the `requirepass` line of `<dir>/redis.conf`.
fn managed_password(dir: &std::path::Path) -> String {
    let conf = std::fs::read_to_string(dir.join("redis.conf")).expect("redis.conf");
    conf.lines()
        .find_map(|l| l.strip_prefix("requirepass "))
        .expect("a requirepass line")
        .trim_matches('"')
        .to_string()
}

/// `redis-cli` on the managed Redis of `dir` (its password from the config file, passed in
/// the environment, not on the command line): its output, trimmed.
fn managed_cli(dir: &std::path::Path, port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .env("REDISCLI_AUTH", managed_password(dir))
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// SIGTERM, then the exit status (30 s hang guard).
fn sigterm_and_wait(child: &mut std::process::Child) -> std::process::ExitStatus {
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no exit after SIGTERM (30 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What `serve` wrote to its managed Redis just before a SIGTERM is there after a restart on
/// the same directory: a task submitted over the API and 10,000 keys written by one script,
/// the signal sent the moment the write was acknowledged. And the managed Redis was stopped
/// with `SHUTDOWN`, which fsyncs the append-only file (its log says so; a kill would leave no
/// such line).
///
/// What this can and cannot catch: it fails if the data is not in an append-only file that
/// the next start replays (`appendonly no`, another directory), or if Redis is not shut down
/// by `SHUTDOWN` (killed instead). It cannot tell an fsync from none: Redis writes the AOF
/// before it acknowledges, so after any process exit the page cache holds the data; only a
/// power loss would show the difference, which is why the log line is checked.
#[test]
fn managed_redis_keeps_what_was_written_just_before_sigterm() {
    let dir = std::env::temp_dir().join(format!("repoll-aof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let redis_port = free_port();
    let start = |web_port: u16| {
        let mut child = Reaped(vec![ChildGuard::adopt(
            serve_managed_command(web_port, redis_port, &dir)
                .env("REPOLL_WORKERS", "0")
                .env("REPOLL_FIRST_ANSWER_MS", "0")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn repoll"),
        )]);
        if !wait_ready(web_port, Duration::from_secs(30)) {
            let _ = child.0[0].kill();
            panic!("repoll serve not ready (30 s hang guard)");
        }
        child
    };

    let web_port = free_port();
    let mut first = start(web_port);
    let id = submit_query(web_port, "kept across a restart");
    let wrote = managed_cli(
        &dir,
        redis_port,
        &[
            "EVAL",
            "for i = 1, 10000 do redis.call('SET', 'aof-key-' .. i, i) end return 'written'",
            "0",
        ],
    );
    assert_eq!(wrote, "written");
    let status = sigterm_and_wait(first.0[0].child_mut());
    assert!(status.success(), "exit status {status}");
    let log = std::fs::read_to_string(dir.join("redis.log")).expect("redis.log");
    assert!(
        log.contains("User requested shutdown") && log.contains("Calling fsync() on the AOF file"),
        "the managed Redis was not stopped with SHUTDOWN (no AOF fsync in its log):\n{log}"
    );

    let web_port = free_port();
    let mut second = start(web_port);
    let task = http_get(web_port, &format!("/api/v1/queries/{id}")).unwrap();
    assert_eq!(task.status, 200, "{task:?}");
    assert!(task.body.contains("kept across a restart"), "{task:?}");
    assert_eq!(
        managed_cli(&dir, redis_port, &["GET", "aof-key-10000"]),
        "10000"
    );
    assert_eq!(
        managed_cli(
            &dir,
            redis_port,
            &["EVAL", "return #redis.call('KEYS', 'aof-key-*')", "0"]
        ),
        "10000"
    );
    assert!(sigterm_and_wait(second.0[0].child_mut()).success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `REPOLL_WORKERS=0` is a web-only `serve`: a query submitted over HTTP is enqueued, but
/// no worker registers and nothing leases or polls it — though the submit waited 3 s
/// (`REPOLL_FIRST_ANSWER_MS`) for a first poll, time enough for an embedded worker that
/// claims within milliseconds. The control: a `repoll worker` started on the same queue
/// registers, and leases and polls the same task, as the same reads see.
#[test]
fn workers_zero_serves_the_web_only_and_nothing_registers_or_leases() {
    let (web_port, redis_port, sim_port) = (free_port(), free_port(), free_port());
    let _redis = spawn_redis(redis_port, &[]);
    let mut children = Reaped::default();
    let url = format!("redis://127.0.0.1:{redis_port}/");
    let upstream = format!("http://127.0.0.1:{sim_port}/api/query?q={{key}}");
    // serve_command sets REPOLL_WORKERS=0.
    let mut cmd = serve_command(&url, web_port);
    cmd.env("REPOLL_QUEUE", "webonly")
        .env("REPOLL_SIM", "true")
        .env("REPOLL_SIM_ADDR", format!("127.0.0.1:{sim_port}"))
        .env("REPOLL_UPSTREAM_URL", &upstream)
        .env("REPOLL_POLL_INTERVAL_MS", "100")
        .env("REPOLL_FIRST_ANSWER_MS", "3000")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    children
        .0
        .push(ChildGuard::adopt(cmd.spawn().expect("spawn repoll")));
    assert!(
        wait_ready(web_port, Duration::from_secs(30)),
        "serve not ready (30 s hang guard)"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let q = rt
        .block_on(queue::Queue::connect(
            &url,
            queue::QueueConfig {
                name: "webonly".into(),
                ..queue::QueueConfig::default()
            },
        ))
        .unwrap();
    let key = "web only";
    let calls = || {
        rt.block_on(async {
            reqwest::Client::new()
                .get(format!("http://127.0.0.1:{sim_port}/_sim/key"))
                .query(&[("q", key)])
                .send()
                .await
                .expect("sim key")
                .json::<sim::state::KeyDetail>()
                .await
                .expect("sim key json")
                .calls
        })
    };
    // Returns once the first-answer wait is over (no poll ends it early).
    let id = submit_query(web_port, key);
    let task = rt.block_on(q.get(&id)).unwrap().and_then(|d| d.task);
    let task = task.expect("the task is enqueued");
    assert_eq!(task.state, queue::TaskState::Due, "{task:?}");
    assert_eq!((task.polls, task.attempts), (0, 0), "{task:?}");
    let stats = rt.block_on(q.stats()).unwrap();
    assert_eq!((stats.leased, stats.ready), (0, 1), "{stats:?}");
    let workers = rt.block_on(q.workers()).unwrap();
    assert!(workers.is_empty(), "a worker registered: {workers:?}");
    assert_eq!(calls(), 0, "the upstream was called");

    // The control: a worker process on the same queue is seen by the same reads.
    let mut worker = Command::new(env!("CARGO_BIN_EXE_repoll"));
    worker
        .arg("worker")
        .env("REDIS_URL", &url)
        .env("REPOLL_QUEUE", "webonly")
        .env("REPOLL_UPSTREAM_URL", &upstream)
        .env("REPOLL_POLL_INTERVAL_MS", "100")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    children.0.push(ChildGuard::adopt(
        worker.spawn().expect("spawn repoll worker"),
    ));
    let t0 = Instant::now();
    while calls() == 0 || rt.block_on(q.workers()).unwrap().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the control worker did not register and poll (30 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let d = rt.block_on(q.get(&id)).unwrap().expect("detail");
    assert!(
        d.task.as_ref().is_some_and(|t| t.polls >= 1) || d.result.is_some(),
        "{d:?}"
    );
}
