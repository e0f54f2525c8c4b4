//! Late workers against the newer owner of a task, as real `repoll worker` processes: a
//! SIGSTOPped worker that wakes up after another finished its tasks writes nothing, and a
//! worker whose call outlives its lease cannot complete the task while the newer owner still
//! holds it (its `done` refused by the fencing token).

use super::clock::expire_lease;
use super::*;
use crate::common::held_upstream::HeldUpstream;

/// Enqueues `key` as a new task (panics if it was not created); its id.
async fn enqueue_a_new_task(env: &Env, key: &str) -> queue::TaskId {
    match env
        .queue
        .enqueue(key, "", &queue::EnqueuePolicy::default())
        .await
        .unwrap()
    {
        queue::Enqueued::Created(t) => t.id,
        other => panic!("expected a new task, got {other:?}"),
    }
}

/// Starts worker A (`late-a`, leases of `lease_ms`, its metrics on `metrics_port`) against an
/// upstream that takes `answer_ms` to answer it, with `payload=late` in its answers.
fn spawn_late_worker_a(env: &Env, lease_ms: u64, answer_ms: u64, metrics_port: u16) -> ChildGuard {
    ChildGuard::adopt(
        worker_command(env, lease_ms, 1_000)
            .env(
                "REPOLL_UPSTREAM_URL",
                format!(
                    "http://127.0.0.1:{}/api/query?q={{key}}&latency={answer_ms}&payload=late",
                    env.sim_port
                ),
            )
            .env("REPOLL_WORKER_ID", "late-a")
            .env("REPOLL_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
            .spawn()
            .expect("spawn worker A"),
    )
}

/// Checks each task is still leased by A (stopped before its `answer_ms` calls returned).
async fn check_both_tasks_still_leased_by_a(env: &Env, ids: &[queue::TaskId], answer_ms: u64) {
    // Stopped mid-call: both tasks still leased by A, nothing written by it.
    for id in ids {
        let t = env.queue.get(id).await.unwrap().and_then(|d| d.task);
        let t = t.expect("task record");
        assert_eq!(
            (t.state, t.worker.as_deref()),
            (queue::TaskState::Leased, Some("late-a")),
            "A was stopped before its {answer_ms} ms calls returned: {t:?}"
        );
    }
}

/// Waits (60 s) until both tasks have results and nothing is leased, ready, waiting or
/// retrying.
async fn wait_for_b_to_finish_both_tasks(env: &Env) {
    let q = env.queue.clone();
    wait_for(
        "B to finish both tasks",
        Duration::from_secs(60),
        async || {
            q.stats()
                .await
                .map(|s| s.results == 2 && s.leased == 0 && s.ready + s.waiting + s.retrying == 0)
                .unwrap_or(false)
        },
    )
    .await;
}

/// Waits until the upstream has answered A's first call of each key (`answer_ms` after it,
/// with 200 ms to spare).
async fn wait_for_the_upstreams_answers_to_a(env: &Env, keys: [&str; 2], answer_ms: u64) {
    // The upstream has answered A (into its socket) by now; then A runs again.
    let first_calls: Vec<i64> = [sim_key(env, keys[0]).await, sim_key(env, keys[1]).await]
        .iter()
        .map(|k| k.call_ms[0])
        .collect();
    wait_for(
        "the upstream's answers to A",
        Duration::from_secs(20),
        async || {
            first_calls
                .iter()
                .all(|&c| epoch_ms() > c + answer_ms as i64 + 200)
        },
    )
    .await;
}

/// Checks B's results stand and A wrote nothing: no task record, no `payload` of A's in the
/// result, and each history has one `completed`, B's.
async fn check_bs_results_stand_and_a_wrote_nothing(env: &Env, ids: &[queue::TaskId]) {
    // B's results stand; A's final answer (payload "late") was not stored.
    let s = env.queue.stats().await.unwrap();
    assert_eq!(
        (
            s.results,
            s.dead,
            s.leased,
            s.ready + s.waiting + s.retrying
        ),
        (2, 0, 0, 0),
        "{s:?}"
    );
    for id in ids {
        let d = env.queue.get(id).await.unwrap().expect("detail");
        assert!(d.task.is_none(), "no task record came back: {:?}", d.task);
        let r = d.result.expect("result");
        let data: serde_json::Value = serde_json::from_str(&r.data).unwrap();
        assert_eq!(data["progress"], 1.0, "{data}");
        assert!(
            data.get("payload").is_none(),
            "A's answer was stored: {data}"
        );
        let h: Vec<_> = d.history.iter().rev().collect();
        let kinds: Vec<_> = h.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "enqueued",
                "claimed",
                "lease_expired",
                "claimed",
                "completed"
            ],
            "{h:?}"
        );
        assert!(h[1].detail.contains("by late-a"), "{h:?}");
        assert!(h[2].detail.contains("from late-a"), "{h:?}");
        assert!(h[4].detail.contains("by late-b"), "{h:?}");
    }
}

/// README: "a late worker can never overwrite a newer one's work". Worker A (a real process)
/// claims two tasks and calls the upstream, which takes 4 s to answer A; A is SIGSTOPped
/// mid-call, so it cannot renew its 1.5 s leases either. Worker B reaps the expired leases,
/// claims and completes both. Only then is A continued, with the upstream's answers waiting
/// for it: a final one (marked `payload=late`) for one task, a "processing" one for the
/// other. A must write nothing: on waking it finds each lease lost (counted in
/// `repoll_stale_tokens_total`) — in practice by its overdue renewal, before any outcome
/// write (A's log says `op="renew"`) — and drops both answers; B's results stand, each
/// history has exactly one `completed` (B's), and no task record comes back. (A's outcome
/// write itself, refused by its token while B still holds the lease, is the next test's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_worker_cannot_overwrite_the_newer_result() {
    let env = setup("wplate", sim::SimArgs::default()).await;
    // Done at the first call: A's late answer is final too, so only B's `done` may be stored.
    let final_key = "late-final polls=0";
    // Done 500 ms after the first call: A (the first call) hears "processing", B hears done.
    let partial_key = "late-partial ms=500";
    let mut ids = Vec::new();
    for key in [final_key, partial_key] {
        ids.push(enqueue_a_new_task(&env, key).await);
    }
    let lease_ms = 1_500;
    let answer_ms = 4_000;
    let metrics_port = free_port();
    let mut a = spawn_late_worker_a(&env, lease_ms, answer_ms, metrics_port);
    wait_for(
        "worker A's calls to reach the upstream",
        Duration::from_secs(20),
        async || {
            sim_key(&env, final_key).await.calls >= 1 && sim_key(&env, partial_key).await.calls >= 1
        },
    )
    .await;
    signal(a.child_mut(), "STOP");
    check_both_tasks_still_leased_by_a(&env, &ids, answer_ms).await;

    let mut b = ChildGuard::adopt(
        worker_command(&env, lease_ms, 1_000)
            .env("REPOLL_WORKER_ID", "late-b")
            .spawn()
            .expect("spawn worker B"),
    );
    wait_for_b_to_finish_both_tasks(&env).await;
    wait_for_the_upstreams_answers_to_a(&env, [final_key, partial_key], answer_ms).await;
    signal(a.child_mut(), "CONT");
    wait_for(
        "A to find both its leases lost",
        Duration::from_secs(30),
        async || {
            counter(
                metrics_port,
                "repoll_stale_tokens_total{upstream=\"default\"}",
            )
            .await
                == Some(2.0)
        },
    )
    .await;

    terminate(a.child_mut());
    assert!(a.child_mut().wait().unwrap().success(), "worker A exits 0");
    terminate(b.child_mut());
    assert!(b.child_mut().wait().unwrap().success(), "worker B exits 0");

    check_bs_results_stand_and_a_wrote_nothing(&env, &ids).await;
    // The upstream's view: A's call and B's for each key. Only the final key answered A
    // `done` (dropped); the other answered A "processing" and B `done`.
    let k = sim_key(&env, final_key).await;
    assert_eq!((k.calls, k.done), (2, 2), "{k:?}");
    let k = sim_key(&env, partial_key).await;
    assert_eq!((k.calls, k.done), (2, 1), "exactly one done: {k:?}");
    env.redis.stop().await;
}

/// A `repoll worker` of the fencing test, `fence-{who}`, with one slot, calling `url`.
fn fencing_worker_command(env: &Env, who: &str, url: &str) -> Command {
    // Leases and call timeouts far beyond every hang guard: no renewal, no timeout, so the
    // only write A makes is its completion.
    let lease_ms = 600_000;
    let mut cmd = worker_command(env, lease_ms, 1_000);
    cmd.env("REPOLL_UPSTREAM_URL", url)
        .env("REPOLL_UPSTREAM_TIMEOUT_MS", "600000")
        .env("REPOLL_CONCURRENCY", "1")
        .env("REPOLL_WORKER_ID", format!("fence-{who}"));
    cmd
}

/// Checks the task `id` is leased by `who`; its fencing token.
async fn token_of_the_lease_held_by(env: &Env, id: &queue::TaskId, who: &str) -> u64 {
    let t = env
        .queue
        .get(id)
        .await
        .unwrap()
        .and_then(|d| d.task)
        .expect("task");
    assert_eq!(
        (t.state, t.worker.as_deref()),
        (queue::TaskState::Leased, Some(who)),
        "{t:?}"
    );
    t.token
}

/// The counter `name` (label `upstream="default"`) on worker A's metrics page, 0 if absent.
async fn worker_a_counter(metrics_a: u16, name: &str) -> f64 {
    counter(metrics_a, &format!("{name}{{upstream=\"default\"}}"))
        .await
        .unwrap_or(0.0)
}

/// Waits (60 s) for A's completion write, then checks it was refused by the fencing token:
/// no result stored, one stale token and no completion on A's page, B's lease (`token_b`)
/// standing.
async fn wait_for_as_completion_and_check_it_refused(
    env: &Env,
    id: &queue::TaskId,
    metrics_a: u16,
    token_b: u64,
) {
    wait_for(
        "A's completion to be written",
        Duration::from_secs(60),
        async || {
            worker_a_counter(metrics_a, "repoll_stale_tokens_total").await
                + worker_a_counter(metrics_a, "repoll_completions_total").await
                >= 1.0
        },
    )
    .await;
    let d = env.queue.get(id).await.unwrap().expect("detail");
    assert!(d.result.is_none(), "A's answer was stored: {:?}", d.result);
    assert_eq!(
        (
            worker_a_counter(metrics_a, "repoll_stale_tokens_total").await,
            worker_a_counter(metrics_a, "repoll_completions_total").await
        ),
        (1.0, 0.0),
        "A's completion refused by the fencing token"
    );
    assert_eq!(
        token_of_the_lease_held_by(env, id, "fence-b").await,
        token_b,
        "B's lease stands"
    );
}

/// Checks B's result is the one stored, with no task record left and one `completed` in the
/// history, B's.
async fn check_bs_result_is_the_one_stored(env: &Env, id: &queue::TaskId) {
    let d = env.queue.get(id).await.unwrap().expect("detail");
    assert!(d.task.is_none(), "no task record left: {:?}", d.task);
    let data: serde_json::Value = serde_json::from_str(&d.result.expect("result").data).unwrap();
    assert_eq!(data, serde_json::json!({"by": "b"}));
    let h: Vec<_> = d.history.iter().rev().collect();
    let kinds: Vec<_> = h.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "enqueued",
            "claimed",
            "lease_expired",
            "claimed",
            "completed"
        ],
        "{h:?}"
    );
    assert!(h[1].detail.contains("by fence-a"), "{h:?}");
    assert!(h[4].detail.contains("by fence-b"), "{h:?}");
}

/// The fencing token of `complete` while the newer owner still holds its lease (the case the
/// test above cannot reach: there, B has finished and the task record is gone, so any write
/// of A finds nothing). Worker A (a real process, one slot) claims the task and calls an
/// upstream the test holds. Its lease runs out meanwhile (moved into the past in Redis time;
/// A's real lease of 10 min means it never renews within the test, so nothing but the write
/// can tell it the lease is lost). Worker B reaps, claims it with a newer token and calls
/// too, held as well. Only then does the upstream answer A `done`: A's completion meets a
/// task leased (to B) under another token, and must be refused (A's
/// `repoll_stale_tokens_total` 1). Then B is answered: B's result is the one stored, with one
/// `completed` in the history, B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_completion_is_refused_while_the_new_owner_holds_the_lease() {
    let env = setup("wpfence", sim::SimArgs::default()).await;
    let mut upstream = HeldUpstream::start().await;
    let id = enqueue_a_new_task(&env, "fenced").await;
    let (url_a, url_b) = (upstream.url("a"), upstream.url("b"));
    let metrics_a = free_port();
    let mut a = ChildGuard::adopt(
        fencing_worker_command(&env, "a", &url_a)
            .env("REPOLL_METRICS_ADDR", format!("127.0.0.1:{metrics_a}"))
            .spawn()
            .expect("spawn worker A"),
    );
    assert_eq!(upstream.next_call().await, "a");
    let token_a = token_of_the_lease_held_by(&env, &id, "fence-a").await;
    // Metrics up (the counter reads 0, not "no page"), before anything is refused.
    wait_for("A's metrics", Duration::from_secs(30), async || {
        counter(metrics_a, "repoll_stale_tokens_total{upstream=\"default\"}").await == Some(0.0)
    })
    .await;

    expire_lease(&env.queue, &id).await;
    let mut b = ChildGuard::adopt(
        fencing_worker_command(&env, "b", &url_b)
            .spawn()
            .expect("spawn worker B"),
    );
    assert_eq!(upstream.next_call().await, "b");
    let token_b = token_of_the_lease_held_by(&env, &id, "fence-b").await;
    assert!(
        token_b > token_a,
        "B's token {token_b} is newer than A's {token_a}"
    );

    // A hears `done` while B holds the lease: its completion is written, and must be
    // refused. Waited for: A's write, refused (stale token) or accepted (a completion).
    upstream.answer("a");
    wait_for_as_completion_and_check_it_refused(&env, &id, metrics_a, token_b).await;

    // B is answered: its result is stored.
    upstream.answer("b");
    let q = env.queue.clone();
    wait_for("B's result", Duration::from_secs(60), async || {
        q.stats()
            .await
            .map(|s| s.results == 1 && s.leased == 0)
            .unwrap_or(false)
    })
    .await;
    terminate(a.child_mut());
    assert!(a.child_mut().wait().unwrap().success(), "worker A exits 0");
    terminate(b.child_mut());
    assert!(b.child_mut().wait().unwrap().success(), "worker B exits 0");

    check_bs_result_is_the_one_stored(&env, &id).await;
    env.redis.stop().await;
}
