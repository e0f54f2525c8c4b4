//! Only requests whose target is a path reach the app: an authority-form (`CONNECT host:port`,
//! `POST host:port`) or asterisk-form (`OPTIONS *`) request line is answered 400 by the accept
//! loop, with no panic and no log line, and counted; the absolute-form (`GET http://host/path`,
//! legal HTTP/1.1) is served by its path. Leptos's handlers unwrapped the target's path, so
//! each such line was a panic, a 500 and a backtrace in the log: an anonymous log flood.

use crate::common;

use std::{
    io::{Read, Write},
    net::SocketAddr,
    process::Stdio,
    time::Duration,
};

use testkit::{free_port, ChildGuard};

/// The request lines that name no path, each on its own connection.
const NOT_A_PATH: [&str; 4] = [
    "CONNECT 127.0.0.1:6379 HTTP/1.1",
    "POST 127.0.0.1:47313 HTTP/1.1",
    "GET 127.0.0.1:47313 HTTP/1.1",
    "OPTIONS * HTTP/1.1",
];

/// One request on its own connection, read to its end (the answers here close it); the
/// answer's text. A 30 s read timeout is the hang guard.
fn exchange(addr: SocketAddr, line: &str, extra: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{line}\r\nhost: {addr}\r\ncontent-length: 0\r\nconnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .expect("the answer ends (30 s hang guard)");
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(answer: &str) -> &str {
    answer.split(' ').nth(1).unwrap_or("")
}

/// Through the real router (the app's pages included) behind the real accept loop.
#[tokio::test(flavor = "multi_thread")]
async fn only_origin_form_request_lines_reach_the_app() {
    use common::api::*;
    let env = Env::start(Opts::default()).await;
    let addr = env.listen().await;
    let answers = tokio::task::spawn_blocking(move || {
        let bad: Vec<String> = NOT_A_PATH
            .iter()
            .map(|line| exchange(addr, line, ""))
            .collect();
        let absolute = exchange(addr, &format!("GET http://{addr}/healthz HTTP/1.1"), "");
        let absolute_page = exchange(addr, &format!("GET http://{addr}/ HTTP/1.1"), "");
        let good = exchange(addr, "GET /healthz HTTP/1.1", "");
        (bad, absolute, absolute_page, good)
    })
    .await
    .unwrap();
    let (bad, absolute, absolute_page, good) = answers;
    for (line, answer) in NOT_A_PATH.iter().zip(&bad) {
        assert_eq!(status_of(answer), "400", "{line}: {answer}");
        assert!(
            answer.contains(r#""code":"bad_request""#),
            "{line}: the API's error shape: {answer}"
        );
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{line}: {answer}"
        );
    }
    // The absolute-form is legal HTTP/1.1: its path is served, pages included.
    assert_eq!(status_of(&absolute), "200", "{absolute}");
    assert!(absolute.ends_with("ok"), "{absolute}");
    assert_eq!(status_of(&absolute_page), "200", "{absolute_page}");
    // And the server goes on as before.
    assert_eq!(status_of(&good), "200", "{good}");
    env.stop().await;
}

/// The real binary: 200 such lines are 200 answers of 400, counted on /metrics, and not one
/// line in its log (it used to write a panic with its backtrace per request). The log is
/// where the process writes it: standard output (tracing's lines) and standard error (a
/// panic's message, the start's notices) into one file; that it is the log is checked by the
/// start's own "listening on" line in it.
#[test]
fn a_flood_of_bad_request_lines_leaves_no_log_and_is_counted() {
    let redis_port = free_port();
    let _redis = common::process::spawn_redis(redis_port, &[]);
    let web_port = free_port();
    let log = std::env::temp_dir().join(format!(
        "repoll-request-lines-{}-{web_port}.log",
        std::process::id()
    ));
    // Both streams append to the one file (a shared offset: neither overwrites the other).
    let _ = std::fs::remove_file(&log);
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    let mut cmd =
        common::process::serve_command(&format!("redis://127.0.0.1:{redis_port}"), web_port);
    cmd
        // Info and up: what an operator usually runs with.
        .env("RUST_LOG", "info")
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out));
    let _repoll = ChildGuard::spawn(cmd).expect("spawn repoll");
    assert!(
        common::process::wait_ready(web_port, Duration::from_secs(60)),
        "repoll serve became ready (60 s hang guard)"
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], web_port));
    // The log as it stands once started (the requests below must add nothing to it): it
    // holds the start's lines, so a line the requests wrote would be seen.
    let before = std::fs::read_to_string(&log).unwrap();
    assert!(
        before.contains("listening on http://"),
        "the process's log is not in {}:\n{before}",
        log.display()
    );
    let n = 200;
    let answers: Vec<(&str, String)> = (0..n)
        .map(|i| {
            let line = NOT_A_PATH[i % NOT_A_PATH.len()];
            (line, exchange(addr, line, ""))
        })
        .collect();
    let metrics = exchange(addr, "GET /metrics HTTP/1.1", "");
    let good = exchange(addr, "GET /healthz HTTP/1.1", "");
    let after = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let added = after.strip_prefix(before.as_str()).unwrap_or(&after);
    let lines = added.lines().count();
    assert!(
        !added.to_ascii_lowercase().contains("panic") && lines < n / 10,
        "the requests wrote {lines} log lines:\n{}",
        added.chars().take(2000).collect::<String>()
    );
    for (line, answer) in &answers {
        assert_eq!(status_of(answer), "400", "{line}: {answer}");
    }
    assert!(
        metrics.contains(&format!("repoll_bad_request_lines_total {n}")),
        "{metrics}"
    );
    assert_eq!(status_of(&good), "200", "{good}");
}
