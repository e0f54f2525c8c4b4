//! The real `repoll` binary starting up: its help and config file, the mistakes that stop the
//! start (and never print a password), waiting for a Redis that loads or is down, and the
//! admin password printed for the run.

use crate::common;
use common::process::*;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use testkit::free_port;
use testkit::http::{Answer, BlockingHttp};

/// A hang guard for commands that end at once (help, a refused start): never a hang.
const ENDS_WITHIN: Duration = Duration::from_secs(30);

#[test]
fn help_documents_every_setting_with_its_environment_variable() {
    let mut cmd = repoll();
    cmd.args(["serve", "--help"]);
    let out = output_within(cmd, ENDS_WITHIN);
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
    let mut cmd = repoll();
    cmd.args(["serve", "--help", "--config"])
        .arg(&good)
        .env_remove("REPOLL_QUEUE")
        .env_remove("REPOLL_UPSTREAM_TIMEOUT_MS");
    let out = output_within(cmd, ENDS_WITHIN);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[default: from-config-file]"), "{help}");
    assert!(help.contains("[default: 4321]"), "{help}");
    // The variable names the file as well as the flag does.
    let mut cmd = repoll();
    cmd.args(["worker", "--help"])
        .env("REPOLL_CONFIG", &good)
        .env_remove("REPOLL_QUEUE");
    let out = output_within(cmd, ENDS_WITHIN);
    assert!(String::from_utf8_lossy(&out.stdout).contains("[default: from-config-file]"));

    // A typo is an error before anything starts, naming the key; so is a missing file.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "upstream_timeout = 5\n").unwrap();
    for (file, words) in [
        (&bad, "unknown setting `upstream_timeout`"),
        (&dir.join("missing.toml"), "cannot read config file"),
    ] {
        let mut cmd = repoll();
        cmd.args(["serve", "--config"]).arg(file);
        let out = output_within(cmd, ENDS_WITHIN);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(words), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_worker_needs_redis_url() {
    let mut cmd = repoll();
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
    let _redis = spawn_redis(port, &["--requirepass", "the-right-one"]);
    let mut cmd = repoll();
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
            let mut cmd = repoll();
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
    let mut child = repoll()
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
        let mut cmd = repoll();
        cmd.args(["sim", "--addr", "127.0.0.1:0", flag, value]);
        let out = output_within(cmd, Duration::from_secs(20));
        assert!(!out.status.success(), "{flag} {value} started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

/// Tracing and logging settings are checked before anything starts: a mistake names its
/// variable and stops the start (exit 2), for `serve` and `worker` alike.
#[test]
fn trace_and_log_format_mistakes_stop_the_start() {
    for (command, var, value, words) in [
        ("serve", "REPOLL_LOG_FORMAT", "xml", "REPOLL_LOG_FORMAT"),
        (
            "worker",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "grpc",
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported",
        ),
        (
            "serve",
            "OTEL_TRACES_SAMPLER",
            "sometimes",
            "OTEL_TRACES_SAMPLER",
        ),
        (
            "worker",
            "OTEL_TRACES_SAMPLER_ARG",
            "2",
            "OTEL_TRACES_SAMPLER_ARG",
        ),
        (
            "serve",
            "REPOLL_TRACE_URL",
            "http://jaeger:16686/trace/",
            "REPOLL_TRACE_URL must hold {trace_id}",
        ),
        (
            "serve",
            "REPOLL_TRACE_URL",
            "javascript:alert(1)//{trace_id}",
            "REPOLL_TRACE_URL must be an http:// or https:// URL",
        ),
    ] {
        let mut cmd = repoll();
        cmd.arg(command)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
            .env("OTEL_TRACES_SAMPLER", "traceidratio")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_SDK_DISABLED")
            .env(var, value);
        let out = output_within(cmd, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(2), "{command} {var}={value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(words), "{command} {var}={value}: {stderr}");
    }
}
