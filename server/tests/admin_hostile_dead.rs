//! Issue 39's probe, what held: 1,867 dead tasks full of hostile text — queries and last
//! errors that try to open a script, close the hydration script, break out of an attribute,
//! end a textarea, hide the page with a style, or come pre-escaped — are shown as text on
//! every admin page that lists or shows them, every page of the dead list followed to its
//! end. Through the real router against a private redis-server (`common::admin`).
//! (`admin_pages.rs::hostile_upstream_text_is_inert_on_every_admin_page` tries one tag in each
//! kind of upstream text; this is the probe's volume and variety on the dead tasks.)

use crate::common;
use common::admin::*;

/// The probe's count of dead tasks: 38 pages of the dead list, the last one partly filled.
const DEAD: usize = 1_867;

/// Hostile texts, each with a distinct number so that where it shows can be told apart.
/// The last one comes escaped already: it must be shown as typed (`&lt;` on the page), not
/// decoded into markup.
const HOSTILE: [&str; 9] = [
    "<script>alert(0)</script>",
    "</script><script>alert(1)</script>",
    "\"><img src=x onerror=alert(2)>",
    "'><svg onload=alert(3)>",
    "</textarea></title><iframe srcdoc=alert(4)>",
    "<!--<style>*{display:none}</style>-->",
    "<a href=\"javascript:alert(6)\">click</a>",
    "<b>bold(7)</b> {{7*7}} ${alert(7)}",
    "&lt;b&gt;pre-escaped(8)&lt;/b&gt; &amp;",
];

/// What must never be on a page: the markup of [`HOSTILE`] as markup. (The hydration data
/// carries the texts too, inside a script: Leptos writes every `<` there as `\u003c`, so a
/// raw `<` of them is markup wherever it is.)
const MARKUP: [&str; 9] = [
    "<script>alert(",
    "</script><script>alert(",
    "<img src=x",
    "<svg onload",
    "<iframe srcdoc",
    "<style>*{",
    "<a href=\"javascript:",
    "<b>bold(",
    "<b>pre-escaped(",
];

/// The texts as they must show: escaped once (the last one twice: its `&` too).
fn shown(n: usize) -> &'static str {
    [
        "&lt;script&gt;alert(0)&lt;/script&gt;",
        "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;",
        "&gt;&lt;img src=x onerror=alert(2)&gt;",
        "&gt;&lt;svg onload=alert(3)&gt;",
        "&lt;/textarea&gt;&lt;/title&gt;&lt;iframe srcdoc=alert(4)&gt;",
        "&lt;!--&lt;style&gt;*{display:none}&lt;/style&gt;--&gt;",
        "&lt;a href=",
        "&lt;b&gt;bold(7)&lt;/b&gt;",
        "&amp;lt;b&amp;gt;pre-escaped(8)&amp;lt;/b&amp;gt;",
    ][n]
}

/// Makes [`DEAD`] dead tasks: task `i`'s query holds hostile text `i % 9`, its last error
/// hostile text `(i + 4) % 9`, so every text is on a query and on an error. Returns the id
/// of the first task of each query text.
async fn hostile_dead(q: &queue::Queue) -> Vec<queue::TaskId> {
    let policy = queue::EnqueuePolicy::default();
    for i in 0..DEAD {
        let query = format!("{} #{i}", HOSTILE[i % HOSTILE.len()]);
        q.enqueue(&query, "", &policy).await.unwrap();
    }
    let mut firsts = vec![None; HOSTILE.len()];
    loop {
        let claimed = q.claim("hostile-worker", 200, 60_000).await.unwrap();
        if claimed.is_empty() {
            break;
        }
        for c in claimed {
            let i: usize = c.query.rsplit('#').next().unwrap().parse().unwrap();
            let error = format!("{} !{i}", HOSTILE[(i + 4) % HOSTILE.len()]);
            q.fail(&c.id, c.token, &error, queue::Retry::Dead, 1)
                .await
                .unwrap();
            if i < HOSTILE.len() {
                firsts[i] = Some(c.id);
            }
        }
    }
    assert_eq!(q.stats().await.unwrap().dead, DEAD as u64);
    firsts.into_iter().map(|f| f.expect("claimed")).collect()
}

/// The page's "Next page" link, unescaped, if any.
fn next_page(body: &str) -> Option<String> {
    let at = body.find("data-testid=\"next-page\"")?;
    let tag = &body[body[..at].rfind("<a ")?..at];
    let href = tag.split_once("href=\"")?.1.split('"').next()?;
    Some(href.replace("&amp;", "&"))
}

#[tokio::test]
async fn hostile_text_of_1867_dead_tasks_is_shown_as_text() {
    let env = start().await;
    let (r, q) = (&env.router, &env.queue);
    let firsts = hostile_dead(q).await;
    let cookie = sign_in(r, ADMIN_PW, [10, 0, 0, 70]).await.ok().unwrap();
    let mut bodies = String::new();
    let mut check = async |path: &str| -> String {
        let page = get_page(r, path, Some(&cookie), [10, 0, 0, 70]).await;
        assert_eq!(page.status, 200, "{path}");
        for m in MARKUP {
            if let Some(at) = page.body.find(m) {
                let around = page.body.get(at.saturating_sub(200)..at + 200);
                panic!("{path} renders {m:?} as markup: {around:?}");
            }
        }
        bodies.push_str(&page.body);
        page.body
    };

    // The dead list, newest and oldest first, each followed page by page to its end: every
    // dead task's row is rendered once.
    for order in ["newest", "oldest"] {
        let mut path = Some(format!("/admin/tasks?state=dead&order={order}"));
        let (mut rows, mut pages) = (0, 0);
        while let Some(p) = path {
            let body = check(&p).await;
            if pages == 0 {
                assert_eq!(testid_text(&body, "tab-count-dead"), DEAD.to_string());
            }
            rows += body.matches("data-testid=\"task-row\"").count();
            pages += 1;
            assert!(pages <= 40, "{order}: more pages than {DEAD} rows need");
            path = next_page(&body);
        }
        assert_eq!((rows, pages), (DEAD, DEAD.div_ceil(50)), "{order}");
    }
    // Every other page that lists or counts them, and each text's first task page.
    for path in [
        "/admin",
        "/admin/tasks",
        "/admin/tasks?q=state%3Adead",
        "/admin/tasks?q=state%3Adead%20script",
        "/admin/tasks?state=dead&select=page",
        "/admin/dead",
        "/admin/bulk?state=dead",
        "/admin/bulk?state=dead&query=%3Cscript%3E",
        "/admin/bulk?state=dead&error=%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E",
    ] {
        check(path).await;
    }
    for id in &firsts {
        let body = check(&format!("/admin/tasks/{id}")).await;
        assert!(body.contains(id.as_str()), "{id}");
    }

    // Not vacuous: each text is on the pages, as text.
    for n in 0..HOSTILE.len() {
        assert!(
            bodies.contains(shown(n)),
            "hostile text {n} is not shown as text anywhere: {:?}",
            shown(n)
        );
    }
    env.redis.stop().await;
}
