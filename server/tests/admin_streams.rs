//! The admin dashboard's live stream through the real router: it starts with a resync, tells
//! of changes, refreshes when quiet, sends heartbeats at the configured interval and stays
//! under the stream caps.

use crate::common;
use common::admin::*;
use common::heartbeats;

use std::time::Duration;

use futures::StreamExt;

#[tokio::test]
async fn live_stream_starts_with_resync_and_tells_of_a_change() {
    // A quiet refresh far longer than the test: any `changed` it sees was caused by the change.
    let env = start_quiet(false, Duration::from_secs(3600)).await;
    let mut body = open_live_stream(&env, [10, 0, 0, 8]).await;
    env.queue.pause("test").await.unwrap();
    let next = next_event(&mut body).await;
    assert!(
        next.contains("event: changed") || next.contains("event: resync"),
        "{next}"
    );
    env.redis.stop().await;
}

#[tokio::test]
async fn live_stream_refreshes_when_nothing_happens() {
    // Time-driven state (a due time or lease deadline passing) publishes nothing: with no
    // event at all, the stream still sends `changed` after its quiet time.
    let env = start_quiet(false, Duration::from_millis(200)).await;
    let mut body = open_live_stream(&env, [10, 0, 0, 9]).await;
    let next = next_event(&mut body).await;
    assert!(next.contains("event: changed"), "{next}");
    env.redis.stop().await;
}

/// REPOLL_SSE_KEEPALIVE_MS (here 100 ms) on the dashboard's stream too: heartbeat comments
/// keep it talking while nothing happens (no events: the quiet refresh is an hour).
#[tokio::test]
async fn the_dashboard_stream_sends_heartbeats_at_the_configured_interval() {
    let env = start_custom(
        false,
        Duration::from_secs(3600),
        server::api::ApiArgs {
            sse_keepalive_ms: 100,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let mut body = open_live_stream(&env, [10, 0, 0, 35]).await;
    let seen = heartbeats(&mut body, 3, Duration::from_secs(10)).await;
    assert!(!seen.contains("event:"), "{seen}");
    env.redis.stop().await;
}

/// The dashboard's live stream is under the same caps as the query streams (an open stream
/// holds a connection as long as the client likes; a signed-in page is no exception). Caps
/// 1 per client, 2 in all: a client holding a query stream gets 429 `too_many_streams` for
/// the dashboard's; with both places taken, another client gets 503 `streams_full`; both in
/// the API's error shape, closing the connection. Once the held query stream ends (its place
/// seen back in the hub), the dashboard's stream opens, and it holds its place in turn: the
/// client's next query stream is refused.
#[tokio::test]
async fn the_dashboard_stream_is_under_the_stream_caps() {
    let env = start_capped(
        false,
        Duration::from_secs(3600),
        Default::default(),
        server::live_hub::StreamCaps {
            per_client: 1,
            total: 2,
        },
        |_| {},
    )
    .await;
    let (one, two, three) = ([10, 0, 0, 51], [10, 0, 0, 52], [10, 0, 0, 53]);
    let cookie = sign_in(&env.router, ADMIN_PW, one)
        .await
        .expect("signed in");
    env.queue
        .enqueue("watched query", "", &Default::default())
        .await
        .unwrap();
    let id = queue::TaskId::of_query(&queue::normalise_query("watched query").unwrap());
    let query_stream = format!("/api/v1/queries/{id}/events");

    // Client one holds a query stream: its one place.
    let held = open_stream(&env, &query_stream, None, one).await;
    assert_eq!(held.status().as_u16(), 200);
    let res = open_stream(&env, "/admin/events", Some(&cookie), one).await;
    assert_eq!(refusal(res).await, (429, "too_many_streams".to_string()));

    // Client two takes the last place in all; the dashboard of client three is refused.
    let held_two = open_stream(&env, &query_stream, None, two).await;
    assert_eq!(held_two.status().as_u16(), 200);
    let res = open_stream(&env, "/admin/events", Some(&cookie), three).await;
    assert_eq!(refusal(res).await, (503, "streams_full".to_string()));
    assert_eq!(env.live.open_streams(), 2, "the refusals took no place");

    // Client one's query stream ends; once its place is back, the dashboard's opens.
    drop(held);
    open_streams_come_to(&env, 1).await;
    let res = open_stream(&env, "/admin/events", Some(&cookie), one).await;
    assert_eq!(res.status().as_u16(), 200);
    let mut dashboard = res.into_body().into_data_stream();
    let first = tokio::time::timeout(Duration::from_secs(30), dashboard.next())
        .await
        .expect("first event")
        .expect("stream open")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("event: resync"),
        "{first:?}"
    );
    // The open dashboard stream holds client one's place (with a place free in all).
    assert_eq!(
        env.live.open_streams(),
        2,
        "the dashboard stream holds a place"
    );
    drop(held_two);
    open_streams_come_to(&env, 1).await;
    let res = open_stream(&env, &query_stream, None, one).await;
    assert_eq!(refusal(res).await, (429, "too_many_streams".to_string()));
    let res = open_stream(&env, &query_stream, None, two).await;
    assert_eq!(res.status().as_u16(), 200, "the free place is client two's");
    drop((dashboard, res));
    env.redis.stop().await;
}
