//! A job API provider's webhooks as the queue applies them (callback.lua, `apply_webhook`):
//! found through the job index, applied only to the live life that still holds the job, once
//! per webhook id; "look now" makes a waiting task claimable at once.
use crate::common;

use common::*;
use queue::*;

#[tokio::test]
async fn a_webhook_applies_once_to_the_life_that_holds_its_job() {
    on_each_layout("webhooks", async |conf: QueueConfig| {
        let name = conf.name.clone();
        let name = name.as_str();
        let q = queue_with(conf).await;
        let Enqueued::Created(t) = q
            .enqueue("wh task", "", &EnqueuePolicy::default())
            .await
            .unwrap()
        else {
            panic!("a new task")
        };
        // The submit's answer: the job is stored with a poll a minute away, then indexed.
        let c = q.claim("w1", 1, 30_000).await.unwrap().remove(0);
        let item = Reschedule {
            id: c.id.clone(),
            token: c.token,
            delay_ms: 60_000,
            partial: None,
            latency_ms: 5,
            job: Some("job-a".into()),
        };
        let (r, _) = q
            .reschedule_and_claim(&[item], "w1", 0, 30_000)
            .await
            .unwrap();
        assert!(r[0].is_ok(), "{r:?}");
        q.index_job("job-a", &t.id, t.created_ms, 60_000)
            .await
            .unwrap();
        assert_eq!(
            q.find_job("job-a").await.unwrap(),
            Some((t.id.to_string(), t.created_ms))
        );
        assert_eq!(q.find_job("job-z").await.unwrap(), None);
        let memory = 60_000;

        // Another job (what a refreshed task's old job would be), another life: nothing.
        let before = snapshot(name).await;
        let done = CallbackEffect::Done(r#"{"n":1}"#);
        let other = q.apply_webhook(&t.id, t.created_ms, "job-b", "m1", memory, done);
        assert_eq!(other.await.unwrap(), WebhookApplied::OtherJob);
        let gone = q.apply_webhook(&t.id, t.created_ms + 1, "job-a", "m1", memory, done);
        assert_eq!(gone.await.unwrap(), WebhookApplied::Gone);
        assert_eq!(
            before,
            snapshot(name).await,
            "a refused webhook wrote something"
        );
        assert!(
            q.claim("w2", 1, 30_000).await.unwrap().is_empty(),
            "not due yet"
        );

        // "Look now": the poll a minute away is due at once.
        let look = CallbackEffect::Look;
        let looked = q.apply_webhook(&t.id, t.created_ms, "job-a", "m2", memory, look);
        assert_eq!(looked.await.unwrap(), WebhookApplied::Applied);
        let c2 = q.claim("w2", 1, 30_000).await.unwrap().remove(0);
        assert_eq!(c2.job.as_deref(), Some("job-a"));

        // The result ends the task, fencing out the worker whose poll is out.
        let ended = q.apply_webhook(&t.id, t.created_ms, "job-a", "m3", memory, done);
        assert_eq!(ended.await.unwrap(), WebhookApplied::Applied);
        let late = q.complete(&c2.id, c2.token, r#""from the poll""#, 5).await;
        assert!(late.is_err(), "{late:?}");
        let r = q.result_by_id(&t.id).await.unwrap().expect("a result");
        assert_eq!(r.data, r#"{"n":1}"#);

        // A replay, and a later webhook for the ended task: nothing written.
        let before = snapshot(name).await;
        let replay = q.apply_webhook(&t.id, t.created_ms, "job-a", "m3", memory, done);
        assert_eq!(replay.await.unwrap(), WebhookApplied::Replay);
        let failed = CallbackEffect::Failed("too late");
        let after_end = q.apply_webhook(&t.id, t.created_ms, "job-a", "m4", memory, failed);
        assert_eq!(after_end.await.unwrap(), WebhookApplied::Gone);
        assert_eq!(
            before,
            snapshot(name).await,
            "a late webhook wrote something"
        );
    })
    .await;
}
