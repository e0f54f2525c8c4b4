//! The real `repoll` binary as a process with its managed Redis: SIGTERM drain, the data
//! kept across a restart, the descriptor limit, web-only serving, and no redis-server child
//! left behind.

use crate::common;
use common::process::*;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use testkit::{free_port, ChildGuard};

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
    let out = repoll()
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
    let mut worker = repoll();
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
    // Until the poll's outcome is stored, not only until the upstream saw the call: between
    // the two the task is still leased with no poll (seen on a loaded CI machine).
    let t0 = Instant::now();
    let polled = || {
        let d = rt.block_on(q.get(&id)).unwrap().expect("detail");
        d.task.as_ref().is_some_and(|t| t.polls >= 1) || d.result.is_some()
    };
    while calls() == 0 || rt.block_on(q.workers()).unwrap().is_empty() || !polled() {
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

/// The answers a web process counted in its memory since its last once-a-second write are
/// written when it stops on SIGTERM: three new queries asked and the process stopped at once
/// (no stream open, a short drain, so its once-a-second write has had no chance) leave
/// `miss` = 3 in the queue's per-minute counters.
#[test]
fn a_stop_writes_the_answers_counted_since_the_last_second() {
    let redis_port = free_port();
    let redis = spawn_redis(redis_port, &[]);
    let web_port = free_port();
    let mut serve = serve_command(&redis.url(), web_port);
    serve.env("REPOLL_SHUTDOWN_GRACE_MS", "100");
    let mut procs = Reaped::default();
    procs.serve(serve, web_port);
    for i in 0..3 {
        submit_query(web_port, &format!("counted at the stop {i}"));
    }
    let pid = procs.0[0].id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let limit = Instant::now() + Duration::from_secs(30);
    while procs.0[0].child_mut().try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < limit,
            "no exit after SIGTERM (30 s hang guard)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let counts: std::collections::HashMap<String, u64> = redis::cmd("HGETALL")
        .arg("{repoll}:tp")
        .query(&mut c)
        .unwrap();
    let misses: u64 = counts
        .iter()
        .filter(|(field, _)| field.ends_with(":miss"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(misses, 3, "{counts:?}");
}
