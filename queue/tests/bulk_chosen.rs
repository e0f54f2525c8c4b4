//! Bulk actions on chosen tasks (the rows an operator ticked, issue 29): the same run as a
//! filter's, on exactly those ids — each still checked for its state — and within the limit.
use crate::common;

use common::*;
use queue::*;

/// Makes `n` dead tasks `<prefix>-<i>`; returns their ids.
async fn dead_tasks(q: &Queue, prefix: &str, n: usize) -> Vec<TaskId> {
    let p = EnqueuePolicy {
        max_attempts: 1,
        ..EnqueuePolicy::default()
    };
    for i in 0..n {
        q.enqueue(&format!("{prefix}-{i}"), "", &p).await.unwrap();
    }
    let mut ids = Vec::new();
    loop {
        let claimed = q.claim("w", 200, 60_000).await.unwrap();
        if claimed.is_empty() {
            break;
        }
        for c in claimed {
            q.fail(&c.id, c.token, "boom", Retry::Dead, 1)
                .await
                .unwrap();
            ids.push(c.id);
        }
    }
    ids
}

async fn state_of(q: &Queue, id: &str) -> Option<TaskState> {
    q.get(id).await.unwrap()?.task.map(|t| t.state)
}

fn chosen(state: BulkState, ids: &[TaskId]) -> BulkFilter {
    BulkFilter {
        state,
        ids: Some(ids.to_vec()),
        ..BulkFilter::default()
    }
}

#[tokio::test]
async fn a_run_on_chosen_ids_acts_on_exactly_those() {
    on_each_layout("bulk_chosen", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        let dead = dead_tasks(&q, "chosen", 6).await;
        q.enqueue("still waiting", "", &EnqueuePolicy::default())
            .await
            .unwrap();
        let waiting = q.task_id(&normalise_query("still waiting").unwrap());
        // Two dead ones, one twice, and a task of another state: two selected.
        let pick = vec![
            dead[1].clone(),
            dead[4].clone(),
            dead[1].clone(),
            waiting.clone(),
        ];
        let sel = q
            .bulk_select(&chosen(BulkState::Dead, &pick), usize::MAX)
            .await
            .unwrap();
        assert_eq!((sel.matched, sel.scanned), (2, 3));
        assert_eq!(sel.ids, vec![dead[1].clone(), dead[4].clone()]);
        assert_eq!(
            chosen(BulkState::Dead, &pick[..2]).describe(),
            "dead, 2 tasks chosen by id"
        );

        // Over the limit: nothing starts.
        let refused = q
            .bulk_begin(
                BulkAction::Retry,
                &chosen(BulkState::Dead, &pick),
                "ops",
                1,
                None,
            )
            .await
            .unwrap();
        assert!(matches!(
            refused,
            Err(BulkRefused::OverLimit {
                matched: 2,
                limit: 1
            })
        ));

        let job = q
            .bulk_begin(
                BulkAction::Retry,
                &chosen(BulkState::Dead, &pick),
                "ops",
                10_000,
                None,
            )
            .await
            .unwrap()
            .unwrap();
        let end = job.run().await.unwrap();
        assert_eq!((end.total, end.changed), (2, 2));
        for (i, id) in dead.iter().enumerate() {
            let want = if i == 1 || i == 4 {
                TaskState::Due
            } else {
                TaskState::Dead
            };
            assert_eq!(state_of(&q, id).await, Some(want), "task {i}");
        }
        assert_eq!(state_of(&q, &waiting).await, Some(TaskState::Due));

        // Purge on chosen ids: only those go.
        let job = q
            .bulk_begin(
                BulkAction::Purge,
                &chosen(BulkState::Dead, &dead[2..4]),
                "ops",
                10_000,
                Some(2),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(job.run().await.unwrap().changed, 2);
        assert_eq!(q.stats().await.unwrap().dead, 2);
        assert!(state_of(&q, &dead[2]).await.is_none());
        assert_eq!(state_of(&q, &dead[5]).await, Some(TaskState::Dead));
    })
    .await;
}
