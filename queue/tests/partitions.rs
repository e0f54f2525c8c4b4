//! A partitioned queue (`QueueConfig::partitions` > 1) on one private redis-server: tasks land
//! in every partition's hash tag and nowhere else, a handle works across them (claims sweep
//! every partition, operator switches reach every partition, reads merge exactly), a process
//! configured with another partition count is refused instead of looking for tasks in the
//! wrong place, and a repartition neither runs beside a live process nor lets one that runs
//! the old layout accept anything afterwards.

use crate::common;
use common::*;
use queue::*;
use std::collections::BTreeSet;

fn pcfg(name: &str, partitions: u16) -> QueueConfig {
    QueueConfig {
        partitions,
        ..cfg(name)
    }
}

async fn keys_matching(pattern: &str) -> Vec<String> {
    let mut c = raw().await;
    redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut c)
        .await
        .unwrap()
}

fn policy() -> EnqueuePolicy {
    EnqueuePolicy {
        deadline_ms: 600_000,
        ..EnqueuePolicy::default()
    }
}

/// Every page of `state`, `limit` at a time: the ids in listing order.
async fn list_all(q: &Queue, state: ListState, order: Order, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let page = q
            .list(state, order, cursor.as_deref(), limit)
            .await
            .unwrap();
        assert!(page.items.len() + page.results.len() <= limit);
        out.extend(page.items.iter().map(|t| t.id.to_string()));
        out.extend(page.results.iter().map(|r| r.id.to_string()));
        match page.next_cursor {
            Some(c) => {
                assert!(is_list_cursor(&c), "the cursor handed out is accepted: {c}");
                cursor = Some(c);
            }
            None => return out,
        }
    }
    panic!("paging never ended");
}

#[tokio::test]
async fn every_operation_runs_on_a_partitioned_queue() {
    let q = queue_with(QueueConfig {
        max_lease_losses: 1,
        ..pcfg("pt-every", 4)
    })
    .await;
    assert_eq!(q.partitions(), 4);
    exercise_every_operation(&q).await;
}

#[tokio::test]
async fn tasks_spread_over_the_partitions_and_reads_merge_exactly() {
    let name = "pt-spread";
    let q = queue_with(pcfg(name, 4)).await;
    let texts: Vec<String> = (0..200).map(|i| format!("spread {i}")).collect();
    let items: Vec<(&str, &str)> = texts.iter().map(|t| (t.as_str(), "")).collect();
    let first = q.enqueue_many(&items, &policy()).await.unwrap();
    assert!(first.iter().all(|r| matches!(r, Ok(Enqueued::Created(_)))));
    // Asked again (one batch, one by one): joined, never a second task.
    let again = q.enqueue_many(&items[..20], &policy()).await.unwrap();
    assert!(again.iter().all(|r| matches!(r, Ok(Enqueued::Joined(_)))));
    assert!(matches!(
        q.enqueue(&texts[7], "", &policy()).await.unwrap(),
        Enqueued::Joined(_)
    ));

    // Each task's record is in its own partition; every partition got some; the one-partition
    // layout under `{name}` holds no task.
    for i in 0..4 {
        let tag = q.partition_tag(i);
        assert!(tag.starts_with(&format!("{{{name}#{i}")), "{tag}");
        let n = keys_matching(&format!("{tag}:t:*")).await.len();
        assert!(n > 20, "partition {i} ({tag}) holds {n} tasks");
    }
    assert!(keys_matching(&format!("{{{name}}}:t:*")).await.is_empty());
    for t in &texts[..10] {
        let id = q.task_id(&normalise_query(t).unwrap());
        let p = q.partition_of(&id);
        let key = format!("{}:t:{id}", q.partition_tag(p));
        assert_eq!(keys_matching(&key).await, vec![key.clone()]);
        assert_eq!(q.get(&id).await.unwrap().unwrap().task.unwrap().query, *t);
    }

    let s = q.stats().await.unwrap();
    assert_eq!((s.ready, s.leased, s.waiting), (200, 0, 0), "{s:?}");

    // The ready work pages through every partition, each task once, either way round.
    for order in [Order::OldestFirst, Order::NewestFirst] {
        let ids = list_all(&q, ListState::Ready, order, 30).await;
        let set: BTreeSet<&String> = ids.iter().collect();
        assert_eq!((ids.len(), set.len()), (200, 200), "{order:?}");
    }

    // A claim sweeps the partitions until it has its batch (~50 tasks each here).
    let claimed = q.claim("w", 120, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 120);
    let parts: BTreeSet<usize> = claimed.iter().map(|c| q.partition_of(&c.id)).collect();
    assert!(parts.len() >= 3, "{parts:?}");
    // 40 completed (one call each: the write goes to the task's partition), 40 polled later,
    // 40 left leased.
    for c in &claimed[..40] {
        q.complete(&c.id, c.token, &format!("r {}", c.query), 5)
            .await
            .unwrap();
    }
    let polls: Vec<Reschedule> = claimed[40..80]
        .iter()
        .enumerate()
        .map(|(i, c)| Reschedule {
            id: c.id.clone(),
            token: c.token,
            delay_ms: 60_000 + i as u64 * 100,
            partial: None,
            latency_ms: 1,
            job: None,
        })
        .collect();
    let (r, next) = q.reschedule_and_claim(&polls, "w", 0, 1000).await.unwrap();
    assert!(r.iter().all(|x| x.is_ok()) && next.is_empty());
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.ready, s.leased, s.waiting, s.results),
        (80, 40, 40, 40),
        "{s:?}"
    );

    // Sorted sets merge by (score, id): the waiting tasks in due order across partitions,
    // paged 7 at a time without a gap or a repeat.
    let waiting = list_all(&q, ListState::Waiting, Order::OldestFirst, 7).await;
    let expect: Vec<String> = polls.iter().map(|p| p.id.to_string()).collect();
    assert_eq!(waiting, expect);
    let mut newest = list_all(&q, ListState::Waiting, Order::NewestFirst, 7).await;
    newest.reverse();
    assert_eq!(newest, expect);
    let results = list_all(&q, ListState::Results, Order::OldestFirst, 9).await;
    assert_eq!(results.len(), 40);
    let leased = list_all(&q, ListState::Leased, Order::OldestFirst, 11).await;
    assert_eq!(leased.len(), 40);
    for c in &claimed[..3] {
        let r = q.result_by_id(&c.id).await.unwrap().unwrap();
        assert_eq!(r.data, format!("r {}", c.query));
    }
    // The events of every partition, newest first.
    let ev = q.events(500).await.unwrap();
    assert!(!ev.is_empty());
    // A stale token is refused in its partition as anywhere.
    assert!(matches!(
        q.complete(&claimed[0].id, claimed[0].token, "late", 1)
            .await,
        Err(QueueError::StaleToken)
    ));
    // Find by id prefix looks in every partition.
    let id = claimed[50].id.to_string();
    let (found, whole) = q.ids_with_prefix(&id[..10], 5, 100).await.unwrap();
    assert!(whole && found.iter().any(|f| f.as_str() == id));
}

#[tokio::test]
async fn switches_reach_every_partition_and_the_reaper_covers_them_all() {
    let q = queue_with(QueueConfig {
        max_lease_losses: 0,
        ..pcfg("pt-switch", 3)
    })
    .await;
    let texts: Vec<String> = (0..30).map(|i| format!("switch {i}")).collect();
    let items: Vec<(&str, &str)> = texts.iter().map(|t| (t.as_str(), "")).collect();
    q.enqueue_many(&items, &policy()).await.unwrap();

    q.pause("op").await.unwrap();
    assert!(q.is_paused().await.unwrap());
    assert!(q.stats().await.unwrap().paused);
    assert!(q.claim("w", 30, 1000).await.unwrap().is_empty());
    q.resume("op").await.unwrap();
    assert!(!q.is_paused().await.unwrap());

    q.open_breaker("op", 60_000).await.unwrap();
    assert_eq!(
        q.breaker().await.unwrap().unwrap().state,
        BreakerState::Open
    );
    assert!(q.claim("w", 30, 1000).await.unwrap().is_empty());
    assert!(q.close_breaker("op").await.unwrap());
    assert!(q.breaker().await.unwrap().is_none());

    // Leases of every partition expire and come back.
    let claimed = q.claim("w", 30, 600_000).await.unwrap();
    assert_eq!(claimed.len(), 30);
    for c in &claimed {
        expire_lease(&q, &c.id).await;
    }
    let r = q.reap(100).await.unwrap();
    assert_eq!(r.requeued.len(), 30);
    let again = q.claim("w2", 30, 60_000).await.unwrap();
    assert_eq!(again.len(), 30);
    // The tokens of the second leases fence out the first ones.
    for c in &claimed {
        assert!(matches!(
            q.complete(&c.id, c.token, "late", 1).await,
            Err(QueueError::StaleToken)
        ));
    }
    // Bulk selection and purge walk every partition.
    let sel = q
        .bulk_select(
            &BulkFilter {
                state: BulkState::Leased,
                ..BulkFilter::default()
            },
            100,
        )
        .await
        .unwrap();
    assert_eq!((sel.matched, sel.ids.len()), (30, 30));
    for c in &again[..10] {
        q.fail(&c.id, c.token, "boom", Retry::Dead, 1)
            .await
            .unwrap();
    }
    assert_eq!(q.stats().await.unwrap().dead, 10);
    assert_eq!(q.retry_all_dead("op").await.unwrap(), 10);
    assert_eq!(q.purge(PurgeTarget::Queued, "op").await.unwrap(), 10);
    // A batched write without items is a plain claim: it sweeps every partition too.
    let more: Vec<String> = (0..30).map(|i| format!("switch more {i}")).collect();
    let items: Vec<(&str, &str)> = more.iter().map(|t| (t.as_str(), "")).collect();
    q.enqueue_many(&items, &policy()).await.unwrap();
    let (_, got) = q.complete_and_claim(&[], "w3", 100, 60_000).await.unwrap();
    assert_eq!(got.len(), 30);
}

#[tokio::test]
async fn a_process_with_another_partition_count_is_refused() {
    let q = queue_with(pcfg("pt-count", 4)).await;
    q.enqueue("count 1", "", &policy()).await.unwrap();
    for other in [1, 2, 8] {
        let e = Queue::connect(&server().url(), pcfg("pt-count", other))
            .await
            .expect_err("another count is refused");
        // A refusal of the settings, in their words: no "corrupt data" prefix.
        assert!(matches!(e, QueueError::Config(_)), "{e:?}");
        assert!(
            e.to_string().contains(&format!(
                "queue \"pt-count\" has 4 partitions and this process asks for {other} \
                 (REPOLL_PARTITIONS)"
            )),
            "{e}"
        );
    }
    assert!(Queue::connect(&server().url(), pcfg("pt-count", 4))
        .await
        .is_ok());

    // A queue used before counts were recorded (tasks under `{name}`, no meta) has one.
    let old = queue("pt-old").await;
    old.enqueue("old 1", "", &policy()).await.unwrap();
    let mut c = raw().await;
    let _: () = redis::cmd("DEL")
        .arg("{pt-old}:meta")
        .query_async(&mut c)
        .await
        .unwrap();
    let e = Queue::connect(&server().url(), pcfg("pt-old", 6))
        .await
        .expect_err("a queue with tasks in one partition");
    assert!(e.to_string().contains("has 1 partition and"), "{e}");
    // Bad counts and names, each refused for its own reason (not any error).
    for (conf, why) in [
        (pcfg("pt-zero", 0), "partitions must be 1 to 1024, not 0"),
        (
            pcfg("pt-big", 1025),
            "partitions must be 1 to 1024, not 1025",
        ),
        (pcfg("a#1", 1), "without braces or '#'"),
    ] {
        let e = Queue::connect(&server().url(), conf).await.expect_err(why);
        assert!(e.to_string().contains(why), "{e}");
        assert!(matches!(e, QueueError::Config(_)), "{e:?}");
    }
}

#[tokio::test]
async fn a_drained_queue_moves_to_another_count_with_its_results() {
    let name = "pt-move";
    let one = queue_with(pcfg(name, 1)).await;
    let texts: Vec<String> = (0..40).map(|i| format!("move {i}")).collect();
    let items: Vec<(&str, &str)> = texts.iter().map(|t| (t.as_str(), "")).collect();
    one.enqueue_many(&items, &policy()).await.unwrap();
    let claimed = one.claim("w", 40, 60_000).await.unwrap();
    // One error first (a history entry), then every task completed.
    one.fail(&claimed[0].id, claimed[0].token, "boom", Retry::After(0), 1)
        .await
        .unwrap();
    let again = one.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    for c in claimed[1..].iter().chain([&again]) {
        one.complete(&c.id, c.token, &format!("answer {}", c.query), 3)
            .await
            .unwrap();
    }
    // Refused while a task is live (nothing written).
    one.enqueue("move live", "", &policy()).await.unwrap();
    let before = snapshot(name).await;
    let e = Queue::repartition(one.connection(), pcfg(name, 1), 4)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("1 tasks are live"), "{e}");
    assert_eq!(snapshot(name).await, before);
    let live = one.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    one.complete(&live.id, live.token, "answer move live", 1)
        .await
        .unwrap();

    let r = Queue::repartition(one.connection(), pcfg(name, 1), 4)
        .await
        .unwrap();
    assert_eq!((r.from, r.to, r.results, r.moved), (1, 4, 41, 41));
    assert!(r.histories >= 1, "{r:?}");
    // The old count is refused now, the new one serves every stored result.
    let e = Queue::connect(&server().url(), pcfg(name, 1))
        .await
        .expect_err("the old count is refused");
    assert!(e.to_string().contains("has 4 partitions"), "{e}");
    let four = queue_with(pcfg(name, 4)).await;
    for t in texts.iter().chain([&"move live".to_string()]) {
        let id = four.task_id(&normalise_query(t).unwrap());
        let got = four.result_by_id(&id).await.unwrap().expect("moved");
        assert_eq!(got.data, format!("answer {t}"));
    }
    let first = four.get(&claimed[0].id).await.unwrap().unwrap();
    assert!(
        first.history.iter().any(|h| h.detail.contains("boom")),
        "{first:?}"
    );
    let s = four.stats().await.unwrap();
    assert_eq!(s.results, 41);
    let tp = four.throughput(5, 5).await.unwrap();
    assert_eq!(tp.iter().map(|b| b.completed).sum::<u64>(), 41);
    // Nothing left under the one-partition tag but the control keys.
    let left = keys_matching(&format!("{{{name}}}:*")).await;
    assert_eq!(left, vec![format!("{{{name}}}:meta")], "{left:?}");
    // And back to 3: everything again.
    let r = Queue::repartition(four.connection(), pcfg(name, 4), 3)
        .await
        .unwrap();
    assert_eq!((r.from, r.to, r.results), (4, 3, 41));
    assert!(r.moved > 0 && r.moved <= 41, "{r:?}");
    let three = queue_with(pcfg(name, 3)).await;
    assert_eq!(three.stats().await.unwrap().results, 41);
    for t in &texts {
        let id = three.task_id(&normalise_query(t).unwrap());
        let got = three.result_by_id(&id).await.unwrap().expect("moved");
        assert_eq!(got.data, format!("answer {t}"));
    }
    let tp = three.throughput(5, 5).await.unwrap();
    assert_eq!(tp.iter().map(|b| b.completed).sum::<u64>(), 41);
}

fn web_process(id: &str) -> WebProcess {
    WebProcess {
        id: id.into(),
        host: "web-host".into(),
        pid: 4242,
        started_ms: 0,
        last_seen_ms: 0,
    }
}

fn worker_info(id: &str) -> WorkerInfo {
    WorkerInfo {
        id: id.into(),
        host: "worker-host".into(),
        pid: 4343,
        started_ms: 0,
        in_flight: 0,
        completed: 0,
        dead: 0,
        last_seen_ms: 0,
        rss_bytes: None,
        mode: Default::default(),
        command: None,
    }
}

/// A repartition refuses, writing nothing, while any repoll process of the queue heartbeats:
/// a web process with no worker (it accepts queries into the old layout) as much as a worker,
/// each named with its pid and host; once they leave the registry it runs.
#[tokio::test]
async fn a_repartition_waits_for_every_process_web_ones_included() {
    let name = "pt-procs";
    let q = queue_with(pcfg(name, 1)).await;
    q.heartbeat_web(&web_process("web-1"), 600_000)
        .await
        .unwrap();
    let before = snapshot(name).await;
    let e = Queue::repartition(q.connection(), pcfg(name, 1), 2)
        .await
        .expect_err("a web process runs");
    assert!(matches!(e, QueueError::Config(_)), "{e:?}");
    assert!(
        e.to_string().contains(
            "1 repoll process of queue \"pt-procs\" is running: web process web-1 (pid 4242 on \
             web-host). Stop each first"
        ),
        "{e}"
    );
    assert_eq!(snapshot(name).await, before, "a refusal writes nothing");

    q.heartbeat(&worker_info("w-1"), 600_000).await.unwrap();
    let e = Queue::repartition(q.connection(), pcfg(name, 1), 2)
        .await
        .expect_err("two processes run");
    assert!(
        e.to_string().contains(
            "2 repoll processes of queue \"pt-procs\" are running: web process web-1 (pid 4242 \
             on web-host), worker w-1 (pid 4343 on worker-host)"
        ),
        "{e}"
    );
    // A clean stop leaves the registry at once.
    q.remove_web_process("web-1").await.unwrap();
    let e = Queue::repartition(q.connection(), pcfg(name, 1), 2)
        .await
        .expect_err("the worker still runs");
    assert!(e.to_string().contains("1 repoll process"), "{e}");
    q.remove_worker("w-1").await.unwrap();
    let r = Queue::repartition(q.connection(), pcfg(name, 1), 2)
        .await
        .unwrap();
    assert_eq!((r.from, r.to), (1, 2));
}

/// A process that still runs the old layout after a repartition (it never registered, or its
/// entry expired) accepts nothing more: each enqueue is refused inside its script, in its
/// own slot, writing nothing (P = 1 -> 2 and back 2 -> 1). The refusal, or a heartbeat, tells
/// the handle: its claims and reads by id refuse too. A heartbeat that finds the handle's
/// own layout again clears it.
#[tokio::test]
async fn an_enqueue_into_a_layout_the_queue_left_is_refused() {
    let name = "pt-stale";
    let one = queue_with(pcfg(name, 1)).await;
    one.enqueue("stale kept", "", &policy()).await.unwrap();
    let c = one.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    one.complete(&c.id, c.token, "kept", 1).await.unwrap();
    assert!(one.layout_changed().is_none());

    let r = Queue::repartition(one.connection(), pcfg(name, 1), 2)
        .await
        .unwrap();
    assert_eq!((r.from, r.to, r.results), (1, 2, 1));
    let before = snapshot(name).await;
    let e = one
        .enqueue("stale after", "", &policy())
        .await
        .expect_err("the old layout is refused");
    let moved = |have: u16, now: u16| {
        move |e: &QueueError| {
            matches!(e, QueueError::LayoutChanged { queue, have: h, now: n }
            if queue == "pt-stale" && *h == have && *n == now)
        }
    };
    assert!(moved(1, 2)(&e), "{e:?}");
    assert!(
        e.to_string().contains(
            "queue \"pt-stale\" was repartitioned to 2 partitions while this process ran with \
             1: it accepts nothing more; restart it (with REPOLL_PARTITIONS=2)"
        ),
        "{e}"
    );
    let many = one
        .enqueue_many(&[("stale a", ""), ("stale b", "")], &policy())
        .await
        .unwrap();
    assert!(
        many.iter().all(|r| r.as_ref().is_err_and(moved(1, 2))),
        "{many:?}"
    );
    assert_eq!(snapshot(name).await, before, "nothing written");
    // The handle knows now: no claims, no reads by id in the old layout.
    assert!(one.layout_changed().is_some_and(|e| moved(1, 2)(&e)));
    assert!(one
        .claim("w", 1, 60_000)
        .await
        .is_err_and(|e| moved(1, 2)(&e)));
    assert!(one.get(&c.id).await.is_err_and(|e| moved(1, 2)(&e)));

    // The new layout takes the query; the other way round, the same.
    let two = queue_with(pcfg(name, 2)).await;
    let idle_two = queue_with(pcfg(name, 2)).await;
    assert!(matches!(
        two.enqueue("stale after", "", &policy()).await.unwrap(),
        Enqueued::Created(_)
    ));
    let c2 = two.claim("w", 1, 60_000).await.unwrap().pop().unwrap();
    two.complete(&c2.id, c2.token, "after", 1).await.unwrap();
    Queue::repartition(two.connection(), pcfg(name, 2), 1)
        .await
        .unwrap();
    let before = snapshot(name).await;
    for text in ["stale 2a", "stale 2b", "stale 2c", "stale 2d"] {
        let e = two.enqueue(text, "", &policy()).await.unwrap_err();
        assert!(moved(2, 1)(&e), "{text}: {e:?}");
    }
    assert_eq!(snapshot(name).await, before, "nothing written");
    // A handle that asked nothing learns it from its heartbeat, and stops claiming.
    assert!(idle_two.layout_changed().is_none());
    idle_two
        .heartbeat(&worker_info("w-2"), 600_000)
        .await
        .unwrap();
    assert!(idle_two.layout_changed().is_some_and(|e| moved(2, 1)(&e)));
    assert!(idle_two
        .claim("w-2", 1, 60_000)
        .await
        .is_err_and(|e| moved(2, 1)(&e)));
    idle_two.remove_worker("w-2").await.unwrap();
    // The queue has one partition again: the first handle's layout. Its next heartbeat says
    // so, and it works again (the results moved twice are there).
    one.heartbeat_web(&web_process("web-1"), 600_000)
        .await
        .unwrap();
    assert!(one.layout_changed().is_none());
    one.remove_web_process("web-1").await.unwrap();
    assert_eq!(
        one.result_by_id(&c2.id).await.unwrap().unwrap().data,
        "after"
    );
    assert!(one.get(&c.id).await.unwrap().is_some());
    assert!(matches!(
        one.enqueue("stale back", "", &policy()).await.unwrap(),
        Enqueued::Created(_)
    ));
}
