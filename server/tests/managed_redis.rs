//! The managed redis-server's hardening (security review, issue 9): password kept off the
//! command line, one server per data directory, no orphan when repoll dies, restarted when
//! it dies. Every test runs a real `redis-server` on a free port in its own temp directory.

use crate::common;

use std::{
    io::{BufRead, Write},
    os::unix::fs::PermissionsExt,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::tempdir;
use server::managed_redis::{ManagedRedis, ManagedRedisError, CONFIG_FILE, LOCK_FILE};

const REDIS: &str = "redis-server";

/// Port and password from a `redis://:<password>@127.0.0.1:<port>/0` URL.
fn port_and_password(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("redis://:").expect("url has a password");
    let (password, rest) = rest.split_once("@127.0.0.1:").unwrap();
    let port = rest.trim_end_matches("/0").parse().unwrap();
    (port, password.to_string())
}

/// The raw reply to an inline `PING` without authenticating.
fn unauthenticated_ping(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(b"PING\r\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    line
}

async fn ping(url: &str) -> Result<String, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    redis::cmd("PING").query_async(&mut conn).await
}

/// Alive and not a zombie (an orphan's zombie may wait long for a reaper in a container).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn requires_its_password_which_is_kept_off_the_command_line_and_out_of_logs() {
    let dir = tempdir::Dir::new();
    // redis-server overwrites its argv with a process title once it runs, so what `ps` showed
    // at exec time is recorded by a wrapper that then execs the real redis-server.
    let bin_dir = tempdir::Dir::new();
    let argv_file = bin_dir.path().join("argv");
    let wrapper = bin_dir.path().join("redis-server");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > '{}'\nexec {REDIS} \"$@\"\n",
            argv_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Another test's fork may briefly hold the just-written script open (ETXTBSY).
    let mut attempts = 0;
    let redis = loop {
        match ManagedRedis::start(&wrapper, dir.path(), 0).await {
            Err(ManagedRedisError::Spawn { source, .. })
                if source.raw_os_error() == Some(libc::ETXTBSY) && attempts < 20 =>
            {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            started => break started.expect("starts"),
        }
    };
    let (port, password) = port_and_password(redis.url());
    let argv = std::fs::read_to_string(&argv_file).unwrap();
    assert!(!argv.contains(&password), "password on argv: {argv}");
    assert!(argv.contains(CONFIG_FILE), "{argv}");
    assert!(password.len() >= 32, "password {} chars", password.len());
    assert!(password.bytes().all(|b| b.is_ascii_hexdigit()));

    let reply = unauthenticated_ping(port);
    assert!(
        reply.starts_with("-NOAUTH"),
        "unauthenticated PING: {reply:?}"
    );
    assert_eq!(ping(redis.url()).await.unwrap(), "PONG");

    let config = dir.path().join(CONFIG_FILE);
    let mode = std::fs::metadata(&config).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{} mode {mode:o}", config.display());
    assert!(std::fs::read_to_string(&config)
        .unwrap()
        .contains(&password));

    let pid = redis.pid().expect("child pid");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        !cmdline.contains(&password),
        "password in the process title: {cmdline}"
    );

    assert!(!redis.redacted_url().contains(&password));
    assert!(!format!("{redis:?}").contains(&password));
    redis.stop().await;
}

#[tokio::test]
async fn a_given_password_is_used_whatever_characters_it_has() {
    let dir = tempdir::Dir::new();
    let given = "s3cret \"with\" @/:% and \\ spaces";
    let redis = ManagedRedis::start_with_password(REDIS.as_ref(), dir.path(), 0, Some(given))
        .await
        .expect("starts");
    let (port, _) = port_and_password(redis.url());
    assert!(unauthenticated_ping(port).starts_with("-NOAUTH"));
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let ok: String = redis::cmd("AUTH")
        .arg(given)
        .query_async(&mut conn)
        .await
        .expect("AUTH with the given password");
    assert_eq!(ok, "OK");
    assert_eq!(ping(redis.url()).await.unwrap(), "PONG");
    redis.stop().await;
}

#[tokio::test]
async fn a_second_start_on_the_same_dir_is_refused_until_the_first_stops() {
    let dir = tempdir::Dir::new();
    let first = ManagedRedis::start(REDIS.as_ref(), dir.path(), 0)
        .await
        .expect("first starts");

    // The child holds the locked file too, so an orphan would keep the directory locked.
    let pid = first.pid().unwrap();
    let child_holds_lock = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| target.ends_with(LOCK_FILE));
    assert!(child_holds_lock, "redis-server inherits the lock file");

    let err = ManagedRedis::start(REDIS.as_ref(), dir.path(), 0)
        .await
        .expect_err("second start on the same dir is refused");
    assert!(
        matches!(err, ManagedRedisError::Locked { .. }),
        "expected Locked, got {err:?}"
    );
    assert!(
        err.to_string().contains("another repoll serve is using"),
        "{err}"
    );
    assert_eq!(ping(first.url()).await.unwrap(), "PONG", "first unharmed");

    first.stop().await;
    let second = ManagedRedis::start(REDIS.as_ref(), dir.path(), 0)
        .await
        .expect("starts once the first stopped");
    second.stop().await;
}

#[tokio::test]
async fn a_redis_server_left_running_in_the_dir_is_refused() {
    let dir = tempdir::Dir::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // An orphan of an older repoll: no lock file, just a redis-server on the directory.
    let stray = KillOnDrop(
        Command::new(REDIS)
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while ping(&format!("redis://127.0.0.1:{port}/0")).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "stray redis-server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match ManagedRedis::start(REDIS.as_ref(), dir.path(), 0).await {
        Err(ManagedRedisError::InUse { pid, .. }) => assert_eq!(pid, stray.0.id()),
        other => panic!("expected InUse, got {other:?}"),
    }
}

/// A child process killed (and reaped) even when the test fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The pids of the live processes whose parent is `parent` and whose name holds `comm`.
fn children_named(parent: u32, comm: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // `pid (comm) state ppid ...`; comm may hold spaces, so split at the last `)`.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let ppid = rest.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
            head.contains(comm) && ppid == Some(parent)
        })
        .collect()
}

/// The real `repoll serve` (a multi-thread runtime, its managed Redis forked on a runtime
/// worker thread) dies without running any code of its own — SIGABRT, as `abort()` does,
/// with core dumps off — and its redis-server child must die too (`PR_SET_PDEATHSIG`), which
/// also frees the data directory's lock. Every step is asserted: no outcome of the run
/// counts as a pass unless the child was seen alive under repoll and then seen gone.
#[tokio::test]
async fn the_child_dies_when_its_parent_aborts() {
    use std::os::unix::process::CommandExt;
    let dir = tempdir::Dir::new();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let redis_port = free();
    let mut cmd = crate::common::process::repoll();
    cmd.arg("serve")
        .env_remove("REDIS_URL")
        .env("REPOLL_ADDR", format!("127.0.0.1:{}", free()))
        .env("REPOLL_WORKERS", "0")
        .env("REPOLL_MANAGED_REDIS_PORT", redis_port.to_string())
        .env("REPOLL_MANAGED_REDIS_DIR", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; it only reads the struct passed.
    unsafe {
        cmd.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &none) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let parent = KillOnDrop(cmd.spawn().expect("spawn repoll serve"));
    let parent_pid = parent.0.id();

    // The managed Redis is up (it asks for its password) and is repoll's child.
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid = loop {
        let up = std::net::TcpStream::connect(("127.0.0.1", redis_port)).is_ok()
            && unauthenticated_ping(redis_port).starts_with("-NOAUTH");
        match children_named(parent_pid, "redis").as_slice() {
            [pid] if up => break *pid,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no managed redis-server child of repoll serve (20 s hang guard)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(alive(pid));

    // SAFETY: a plain kill(2) of the process this test started.
    assert_eq!(unsafe { libc::kill(parent_pid as i32, libc::SIGABRT) }, 0);
    let mut parent = parent;
    let status = parent.0.wait().unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(libc::SIGABRT),
            "repoll aborted: {status}"
        );
    }

    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        if Instant::now() > deadline {
            // SAFETY: a plain kill(2) of the orphan this test made.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("redis-server {pid} outlived its aborted parent (10 s hang guard)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // With the orphan gone, so is its hold on the directory's lock.
    let again = ManagedRedis::start(REDIS.as_ref(), dir.path(), 0)
        .await
        .expect("the directory is free again");
    again.stop().await;
}

#[tokio::test]
async fn a_killed_child_is_restarted_with_its_data_and_clients_reconnect() {
    let dir = tempdir::Dir::new();
    let redis = ManagedRedis::start(REDIS.as_ref(), dir.path(), 0)
        .await
        .expect("starts");
    let client = redis::Client::open(redis.url()).unwrap();
    let mut manager = redis::aio::ConnectionManager::new(client).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("survives")
        .arg("yes")
        .query_async(&mut manager)
        .await
        .unwrap();
    assert_eq!(redis.restarts(), 0);

    let old = redis.pid().unwrap();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(old as i32, libc::SIGKILL) }, 0);

    // The same manager (as the app holds it) gets answers again; the AOF was written before
    // SET replied, so a kill -9 loses nothing.
    let deadline = Instant::now() + Duration::from_secs(10);
    let value = loop {
        let got: Result<Option<String>, _> = redis::cmd("GET")
            .arg("survives")
            .query_async(&mut manager)
            .await;
        match got {
            Ok(v) if redis.pid().is_some_and(|p| p != old) => break v,
            _ => {}
        }
        assert!(Instant::now() < deadline, "not restarted within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(value.as_deref(), Some("yes"));
    assert_eq!(redis.restarts(), 1);
    assert_eq!(ping(redis.url()).await.unwrap(), "PONG");
    let (port, _) = port_and_password(redis.url());
    assert!(
        unauthenticated_ping(port).starts_with("-NOAUTH"),
        "same password"
    );

    // stop() ends the supervisor first: the child stays down and the dir is free.
    let new = redis.pid().unwrap();
    redis.stop().await;
    assert!(!alive(new), "child stopped");
    let again = ManagedRedis::start(REDIS.as_ref(), dir.path(), 0)
        .await
        .expect("dir free after stop");
    again.stop().await;
}
