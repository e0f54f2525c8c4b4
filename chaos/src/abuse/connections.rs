//! The connections the first two phases hold: live streams (each confirmed by its first
//! `state` event) and sockets that send half a request header and stop.

use std::{collections::BTreeMap, time::Duration};

use futures::{stream, StreamExt};
use tokio::{io::AsyncWriteExt, net::TcpStream};

pub(super) struct Streams {
    pub(super) open: Vec<reqwest::Response>,
    pub(super) failed: BTreeMap<String, usize>,
}

/// How long one stream may take to answer and send its first event.
const STREAM_OPEN: Duration = Duration::from_secs(5);

/// Opens `n` live streams, 200 at a time; a stream counts as open once its first `state`
/// event arrived.
pub(super) async fn open_streams(base: &str, id: &str, n: usize) -> Streams {
    let client = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return Streams {
                open: Vec::new(),
                failed: BTreeMap::from([(format!("client: {e}"), n)]),
            }
        }
    };
    let url = format!("{base}/api/v1/queries/{id}/events");
    let results: Vec<Result<reqwest::Response, String>> = stream::iter(0..n)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            async move {
                // A server out of file descriptors leaves connections in the kernel's accept
                // queue: connected, never answered. Bounded, or the check would wait forever.
                let sent = tokio::time::timeout(STREAM_OPEN, client.get(&url).send())
                    .await
                    .map_err(|_| format!("no answer in {} s", STREAM_OPEN.as_secs()))?;
                let mut r = sent.map_err(|e| {
                    if e.is_connect() {
                        "connect".to_string()
                    } else {
                        "request".to_string()
                    }
                })?;
                if !r.status().is_success() {
                    return Err(format!("HTTP {}", r.status().as_u16()));
                }
                match tokio::time::timeout(STREAM_OPEN, r.chunk()).await {
                    Ok(Ok(Some(c))) if String::from_utf8_lossy(&c).contains("event: state") => {
                        Ok(r)
                    }
                    Ok(Ok(_)) => Err("no state event".into()),
                    Ok(Err(_)) => Err("stream error".into()),
                    Err(_) => Err(format!("no event in {} s", STREAM_OPEN.as_secs())),
                }
            }
        })
        .buffer_unordered(200)
        .collect()
        .await;
    let mut s = Streams {
        open: Vec::new(),
        failed: BTreeMap::new(),
    };
    for r in results {
        match r {
            Ok(r) => s.open.push(r),
            Err(e) => *s.failed.entry(e).or_default() += 1,
        }
    }
    s
}

/// How many of the streams still deliver (a heartbeat or event within a short wait counts;
/// so does a quiet stream that has not ended). Consumes them: the phase is over.
pub(super) async fn still_open(streams: Vec<reqwest::Response>) -> usize {
    stream::iter(streams)
        .map(|mut r| async move {
            match tokio::time::timeout(Duration::from_millis(200), r.chunk()).await {
                Ok(Ok(Some(_))) | Err(_) => 1,
                Ok(Ok(None)) | Ok(Err(_)) => 0,
            }
        })
        .buffer_unordered(500)
        .collect::<Vec<usize>>()
        .await
        .into_iter()
        .sum()
}

/// Opens `n` sockets, each sending the first half of a request header and nothing more.
pub(super) async fn open_slow(addr: &str, n: usize) -> (Vec<TcpStream>, BTreeMap<String, usize>) {
    let results: Vec<Result<TcpStream, String>> = stream::iter(0..n)
        .map(|_| async move {
            let mut s = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
                .await
                .map_err(|_| "connect timeout".to_string())?
                .map_err(|e| format!("connect: {}", e.kind()))?;
            s.write_all(
                b"POST /api/v1/queries HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: applicat",
            )
            .await
            .map_err(|e| format!("write: {}", e.kind()))?;
            Ok(s)
        })
        .buffer_unordered(100)
        .collect()
        .await;
    let mut open = Vec::new();
    let mut failed = BTreeMap::new();
    for r in results {
        match r {
            Ok(s) => open.push(s),
            Err(e) => *failed.entry(e).or_default() += 1,
        }
    }
    (open, failed)
}

/// (closed, answered): sockets the server closed, and ones it sent something on (e.g. 408).
pub(super) fn closed_by_server(socks: &mut [TcpStream]) -> (usize, usize) {
    let mut closed = 0;
    let mut answered = 0;
    let mut buf = [0u8; 512];
    for s in socks.iter_mut() {
        match s.try_read(&mut buf) {
            Ok(0) => closed += 1,
            Ok(_) => answered += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => closed += 1,
        }
    }
    (closed, answered)
}
