//! Finding finished tasks (issue 43, row 6): a search by a part of a query finds the stored
//! results too, not only their exact text or id, and `state:results` searches the stored
//! results alone; a task's qualifier beside it is refused with the reason.

use crate::common;
use common::admin::*;

#[tokio::test]
async fn finished_tasks_are_found_by_a_part_of_their_query() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    for text in ["story-1 alpha", "story-2 beta", "other gamma"] {
        q.enqueue(text, "", &Default::default()).await.unwrap();
        let c = q.claim("w", 1, 60_000).await.unwrap().remove(0);
        q.complete(&c.id, c.token, "{}", 5).await.unwrap();
    }
    q.enqueue("story-3 live", "", &Default::default())
        .await
        .unwrap();
    let ip = [10, 0, 0, 44];
    let cookie = sign_in(r, ADMIN_PW, ip).await.ok().unwrap();

    // "story" is no query's exact text: the live task and both stored results match.
    let page = get_page(r, "/admin/tasks?q=story", Some(&cookie), ip).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for t in ["story-1 alpha", "story-2 beta", "story-3 live"] {
        assert!(page.body.contains(t), "{t} not found: {}", page.body);
    }
    assert!(!page.body.contains("other gamma"), "{}", page.body);
    assert!(
        page.body.contains("2 results match among 3 stored results"),
        "{}",
        page.body
    );

    // state:results: the stored results alone, by any part of the query, in any case.
    let page = get_page(
        r,
        "/admin/tasks?q=state%3Aresults%20STORY-1",
        Some(&cookie),
        ip,
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("story-1 alpha"), "{}", page.body);
    for t in ["story-2 beta", "story-3 live", "other gamma"] {
        assert!(!page.body.contains(t), "{t} shown: {}", page.body);
    }

    // A task's qualifier with it: refused, and said why.
    let page = get_page(
        r,
        "/admin/tasks?q=state%3Aresults%20error%3Ax",
        Some(&cookie),
        ip,
    )
    .await;
    assert!(
        page.body
            .contains("state:results finds stored results by their query"),
        "{}",
        page.body
    );
    env.redis.stop().await;
}
