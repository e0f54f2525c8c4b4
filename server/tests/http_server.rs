//! The accept loop on a real socket: slow clients are cut at the header timeout, connections
//! over the cap get a JSON 503 and are closed, the client address reaches handlers, and every
//! accepted connection has `TCP_NODELAY`.
//! (No Redis needed: the router here is a plain axum one.)

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    os::fd::{AsRawFd, RawFd},
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{extract::ConnectInfo, routing::get, Router};
use server::http_server::{self, ConnLimits, ConnStats};
use tokio_util::sync::CancellationToken;

struct Running {
    addr: SocketAddr,
    stats: Arc<ConnStats>,
    stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn start(limits: ConnLimits) -> Running {
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/whoami",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        )
        .route(
            "/hold",
            // An hour: a held place can only come back by its connection closing, never by
            // this handler finishing within a test.
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                "late"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(ConnStats::default());
    let stop = CancellationToken::new();
    tokio::spawn(http_server::serve(
        listener,
        router,
        limits,
        stats.clone(),
        stop.clone(),
        Duration::from_millis(200),
    ));
    Running { addr, stats, stop }
}

/// One blocking HTTP/1.1 exchange on its own connection; the whole answer as text.
fn get_text(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// How a connection ended for the client reading it.
#[derive(Debug, PartialEq)]
enum Ended {
    /// The server closed it (end of stream, or a reset).
    ByServer,
    /// The client's own read timeout ran out first.
    ClientGaveUp,
}

/// How long a client waits for the server to close before giving up: 40 times the 500 ms
/// header timeout of these tests, so no stall makes the server miss it, yet shorter than
/// hyper's own default header timeout (30 s), so a server that lost the configured timeout
/// (and fell back to that default) is told apart.
const CLIENT_PATIENCE: Duration = Duration::from_secs(20);

/// Reads (and discards) until the connection ends or [`CLIENT_PATIENCE`] runs out; who ended
/// it.
fn read_until_closed(mut s: TcpStream) -> Ended {
    s.set_read_timeout(Some(CLIENT_PATIENCE)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ended::ByServer,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ended::ClientGaveUp
            }
            Err(_) => return Ended::ByServer,
        }
    }
}

/// On a server with a 500 ms header timeout: sends `bytes` on a new connection, reads the
/// one answer when `answered`, then reads until the connection ends; who ended it.
async fn ended_after(bytes: &'static [u8], answered: bool) -> Ended {
    let r = start(ConnLimits {
        max_connections: 64,
        header_timeout: Duration::from_millis(500),
    })
    .await;
    let addr = r.addr;
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(bytes).unwrap();
        if answered {
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        }
        read_until_closed(s)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_half_sent_request_is_cut_at_the_header_timeout() {
    // The rest of the head never comes: the server must close it.
    let ended = ended_after(b"GET /healthz HTTP/1.1\r\nhost: x\r\n", false).await;
    assert_eq!(ended, Ended::ByServer);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_kept_alive_connection_is_closed() {
    // One answer, then idle on the kept-alive connection.
    let ended = ended_after(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n", true).await;
    assert_eq!(ended, Ended::ByServer);
}

/// Asks `/healthz` on fresh connections until an answer starts with `prefix` (60 s at most, a
/// hang guard); the last answer.
async fn healthz_until(addr: SocketAddr, prefix: &'static str) -> String {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answer = get_text(addr, "/healthz").unwrap_or_default();
            if answer.starts_with(prefix) || Instant::now() > deadline {
                return answer;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_cap_a_connection_gets_a_json_503_and_others_go_on_after() {
    let r = start(ConnLimits {
        max_connections: 2,
        header_timeout: Duration::from_secs(20),
    })
    .await;
    let addr = r.addr;
    // Two requests held open take both places.
    let held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    // Once the server has taken both (their handlers are running), the next is refused.
    let third = healthz_until(addr, "HTTP/1.1 503").await;
    assert!(third.starts_with("HTTP/1.1 503"), "{third}");
    assert!(third.contains("application/json"), "{third}");
    assert!(third.contains(r#""code":"overloaded""#), "{third}");
    assert!(r.stats.refused.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    // Places come back when connections end.
    drop(held);
    let after = healthz_until(addr, "HTTP/1.1 200").await;
    assert!(after.starts_with("HTTP/1.1 200"), "{after}");
}

#[tokio::test(flavor = "multi_thread")]
async fn handlers_see_the_peer_address() {
    let r = start(ConnLimits {
        max_connections: 8,
        header_timeout: Duration::from_secs(5),
    })
    .await;
    let addr = r.addr;
    let answer = tokio::task::spawn_blocking(move || get_text(addr, "/whoami").unwrap())
        .await
        .unwrap();
    assert!(answer.ends_with("127.0.0.1"), "{answer}");
}

/// The local and peer ports of the TCP socket `fd`, or `None` when `fd` is not a connected
/// IPv4/IPv6 socket (a file, a pipe, a listener, or a descriptor closed meanwhile).
fn tcp_ports(fd: RawFd) -> Option<(u16, u16)> {
    fn port(fd: RawFd, peer: bool) -> Option<u16> {
        // SAFETY: `addr` is a zeroed sockaddr_storage, large enough for any address, and `len`
        // says so; the kernel writes at most `len` bytes. A stale `fd` only makes the call fail.
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let ptr = &mut addr as *mut libc::sockaddr_storage as *mut libc::sockaddr;
        let rc = unsafe {
            if peer {
                libc::getpeername(fd, ptr, &mut len)
            } else {
                libc::getsockname(fd, ptr, &mut len)
            }
        };
        if rc != 0 {
            return None;
        }
        // SAFETY: the family says which address struct the storage holds.
        match i32::from(addr.ss_family) {
            libc::AF_INET => {
                let a = unsafe { &*(ptr as *const libc::sockaddr_in) };
                Some(u16::from_be(a.sin_port))
            }
            libc::AF_INET6 => {
                let a = unsafe { &*(ptr as *const libc::sockaddr_in6) };
                Some(u16::from_be(a.sin6_port))
            }
            _ => None,
        }
    }
    Some((port(fd, false)?, port(fd, true)?))
}

/// The descriptors of this process that are TCP connections from `local_port` to `peer_port`.
fn own_connections(local_port: u16, peer_port: u16) -> Vec<RawFd> {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .filter(|&fd| tcp_ports(fd) == Some((local_port, peer_port)))
        .collect()
}

/// `TCP_NODELAY` of the socket `fd`: 1 when set, 0 when not.
fn nodelay(fd: RawFd) -> libc::c_int {
    let mut value: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` describe a c_int the kernel writes into.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &mut value as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(
        rc,
        0,
        "getsockopt(TCP_NODELAY) on fd {fd}: {}",
        std::io::Error::last_os_error()
    );
    value
}

#[tokio::test(flavor = "multi_thread")]
async fn accepted_connections_have_tcp_nodelay() {
    // The accept loop runs in this process, so the server's side of a connection is one of
    // this process's own descriptors: the one from the server's port to the client's port.
    let r = start(ConnLimits {
        max_connections: 8,
        // Far longer than the test: the kept-alive connection stays open while it is examined.
        header_timeout: Duration::from_secs(600),
    })
    .await;
    let addr = r.addr;
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        // An answer means the server has accepted and set up this connection.
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        let client_port = s.local_addr().unwrap().port();
        let server_side = own_connections(addr.port(), client_port);
        assert_eq!(
            server_side.len(),
            1,
            "the server's side of {client_port} -> {addr} among this process's descriptors"
        );
        assert_eq!(
            nodelay(server_side[0]),
            1,
            "the accepted connection has no TCP_NODELAY"
        );
        // The check can tell the two apart: the client's socket, never set, reads 0.
        assert_eq!(
            own_connections(client_port, addr.port()),
            vec![s.as_raw_fd()]
        );
        assert_eq!(
            nodelay(s.as_raw_fd()),
            0,
            "the client's socket has TCP_NODELAY"
        );
    })
    .await
    .unwrap();
}
