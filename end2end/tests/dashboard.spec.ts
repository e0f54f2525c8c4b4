import { test, expect, Page, Browser, BrowserContext, APIRequestContext } from "@playwright/test";
import * as fs from "fs";
import * as path from "path";
import {
  adminPassword,
  background,
  deadTaskLines,
  luminance,
  quote,
  redis,
  redisPipe,
  redisProxy,
  signIn,
  spawnServe,
  taskId,
  waitLive,
  watchErrors,
} from "./support";

// What the readable dashboard promises, checked in Chromium against the release build
// (`repoll serve --sim`, managed Redis on the e2e's private port): anonymous admin pages are a
// real HTTP redirect carrying no queue data; a user's mistake on the public form is a 4xx with
// the reason on the form, with and without JavaScript; no page scrolls sideways at 375 px;
// dark mode follows the system; a paused queue is visible on the user's query page.
//
// Fixtures that would take long to make through the upstream (dead tasks with a given error,
// a task waiting for a poll an hour away) are written into Redis with redis-cli in the queue's
// own record layout (ARCHITECTURE.md: `{q}:t:<id>` with short fields, the dead / due zsets),
// with a per-run suffix because the e2e Redis lives for the whole run.

const root = path.resolve(__dirname, "..", "..");
const run = Date.now();
const shotDir = path.join(__dirname, "..", "test-results", "screenshots");
const docsDir = path.join(root, "docs", "screenshots");


async function shot(page: Page, name: string, docs = false) {
  fs.mkdirSync(shotDir, { recursive: true });
  const file = path.join(shotDir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  if (docs) {
    fs.mkdirSync(docsDir, { recursive: true });
    fs.copyFileSync(file, path.join(docsDir, `${name}.png`));
  }
}



async function submit(request: APIRequestContext, query: string): Promise<string> {
  const res = await request.post("/api/v1/queries", { data: { query } });
  expect([200, 202]).toContain(res.status());
  return (await res.json()).id;
}

test("anonymous admin pages are a 303 to the sign-in page and carry no queue data", async ({ request }) => {
  // Something worth leaking: a dead task whose query and error would show on these pages.
  const secret = `leak-check-${run}`;
  redisPipe(deadTaskLines(`${secret} polls=1`, `HTTP 503 ${secret}`, Date.now()));
  for (const p of ["/admin", "/admin/tasks?state=dead", "/admin/leases", "/admin/bulk?state=dead", `/admin/tasks/${taskId(`${secret} polls=1`)}`]) {
    const res = await request.get(p, { maxRedirects: 0 });
    expect(res.status(), p).toBe(303);
    expect(res.headers()["location"], p).toBe("/admin/login");
    const body = await res.text();
    expect(body, p).not.toContain(secret);
    expect(body, p).not.toContain("data-testid");
    expect(body.length, p).toBeLessThan(200);
  }
  // The sign-in page itself is a page (not a redirect loop).
  const login = await request.get("/admin/login", { maxRedirects: 0 });
  expect(login.status()).toBe(200);
  expect(await login.text()).not.toContain(secret);
  redis("ZREM", "{repoll}:dead", taskId(`${secret} polls=1`));
  redis("DEL", `{repoll}:t:${taskId(`${secret} polls=1`)}`);
});

async function tooLongThroughTheForm(page: Page) {
  const post = page.waitForResponse((r) => r.request().method() === "POST");
  await page.getByTestId("query-input").fill("x".repeat(600));
  await page.getByTestId("query-submit").click();
  const res = await post;
  expect(res.status()).toBeGreaterThanOrEqual(400);
  expect(res.status()).toBeLessThan(500);
  await expect(page.getByTestId("query-submit-error")).toContainText("512");
  // The user can correct the query on the same form.
  await expect(page.getByTestId("query-input")).toBeVisible();
}

test("a 600-character query through the form is a 4xx with the reason on the form (with JavaScript)", async ({
  page,
}) => {
  const errors = watchErrors(page, [422]);
  await page.goto("/");
  await expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true");
  await tooLongThroughTheForm(page);
  // Still on the form's page: nothing navigated away.
  expect(new URL(page.url()).pathname).toBe("/");
  expect(errors).toEqual([]);
});

test("a 600-character query through the form is a 4xx with the reason on the form (without JavaScript)", async ({
  browser,
}: {
  browser: Browser;
}) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await page.goto("/");
  await tooLongThroughTheForm(page);
  // The reason is on the page as text, not only in the URL.
  expect(page.url()).not.toContain("__err");
  // And the form on that page still works: a good query goes to its page.
  await page.getByTestId("query-input").fill(`nojs-after-error-${run} polls=1`);
  await page.getByTestId("query-submit").click();
  await expect(page).toHaveURL(/\/q\/[0-9a-f]{32}$/);
  await context.close();
});

test("the user's query page says when the service is paused, and carries on after resume", async ({
  browser,
}: {
  browser: Browser;
}) => {
  const admin = await browser.newPage();
  const errors = watchErrors(admin);
  await signIn(admin);
  const user = await browser.newPage();
  const userErrors = watchErrors(user);
  try {
    await admin.getByTestId("pause").click();
    await expect(admin.getByTestId("paused")).toHaveText("paused");
    // The user asks while paused: the page (server-rendered, then live) says so.
    await user.goto("/");
    await expect(user.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true");
    await user.getByTestId("query-input").fill(`paused-${run} polls=1`);
    await user.getByTestId("query-submit").click();
    await expect(user).toHaveURL(/\/q\/[0-9a-f]{32}$/);
    await expect(user.getByTestId("query-status")).toHaveText("processing");
    await expect(user.getByTestId("query-paused")).toContainText("paused");
    await expect(user.getByTestId("query-paused")).toContainText("will continue");
    await shot(user, "query-paused");
    // Resumed by the admin: the notice goes and the query finishes, without a reload.
    await admin.getByTestId("resume").click();
    await expect(admin.getByTestId("paused")).toHaveText("running");
    await expect(user.getByTestId("query-status")).toHaveText("done", { timeout: 20_000 });
    await expect(user.getByTestId("query-paused")).toHaveCount(0);
    // Both actions are in the audit log.
    await expect(admin.getByTestId("audit")).toContainText("pause");
    await expect(admin.getByTestId("audit")).toContainText("resume");
  } finally {
    redis("DEL", "{repoll}:paused");
  }
  expect(errors).toEqual([]);
  expect(userErrors).toEqual([]);
});

/** Whether the page scrolls sideways: the document is wider than the viewport. */
async function widths(page: Page): Promise<{ scroll: number; client: number }> {
  return page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
  }));
}

async function noSidewaysScroll(page: Page, url: string, ready: () => Promise<void>) {
  await page.goto(url);
  await ready();
  const w = await widths(page);
  expect(w.scroll, `${url}: ${w.scroll} px wide in a ${w.client} px viewport`).toBeLessThanOrEqual(w.client);
  expect(await splitWords(page), `${url}: words split inside a table cell`).toEqual([]);
}

/**
 * The words and numbers (up to 24 characters) of table cells that the browser has drawn on
 * more than one line: "Ca lls", "34 6", "clos ed". Measured on the rendered text (a range per
 * word, its line boxes). Upstream text cells (a query, an error, a call) may hold a token
 * longer than any line and are left out; so are longer tokens (ids) on a phone.
 */
async function splitWords(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const bad: string[] = [];
    for (const cell of Array.from(document.querySelectorAll("th, td"))) {
      if (cell.closest("td.query, td.error-text, td.call-text")) continue;
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const text = n.textContent ?? "";
        // Words between the places a line may break anyway (spaces, hyphens, slashes, dashes).
        for (const m of text.matchAll(/[^\s\-\/–—·]+/g)) {
          if (m[0].length > 24) continue;
          const r = document.createRange();
          r.setStart(n, m.index!);
          r.setEnd(n, m.index! + m[0].length);
          const lines = new Set(
            Array.from(r.getClientRects())
              .filter((x) => x.width > 0)
              .map((x) => Math.round(x.top)),
          );
          if (lines.size > 1) bad.push(`"${m[0]}" in ${cell.tagName.toLowerCase()} ${(cell as HTMLElement).dataset.label ?? ""}`);
        }
      }
    }
    return bad;
  });
}

test("table cells never split a word or a number at 1280 px", async ({ browser }) => {
  const context: BrowserContext = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const errors = watchErrors(page);
  try {
    await signIn(page);
    for (const url of ["/admin", "/admin/upstreams", "/admin/tasks?state=dead", "/admin/tasks?state=results", "/admin/leases?within=120000", "/admin/bulk?state=dead"]) {
      await page.goto(url);
      await waitLive(page);
      expect(await splitWords(page), `${url}: words split inside a table cell`).toEqual([]);
    }
  } finally {
    await context.close();
  }
  expect(errors).toEqual([]);
});

test("no page scrolls sideways at 375 px", async ({ browser, request }) => {
  test.setTimeout(120_000);
  const context: BrowserContext = await browser.newContext({ viewport: { width: 375, height: 800 } });
  const page = await context.newPage();
  const errors = watchErrors(page);
  // The widest content each page can get: a long unbroken query, a long error, one task in
  // each list that can be made to stay there.
  const long = `unbroken-${run}-` + "y".repeat(180);
  const doneId = await submit(request, `${long} polls=1`);
  const deadQuery = `narrow-dead-${run}-${"z".repeat(120)} polls=1`;
  const deadError = `HTTP 503: ${"upstream-said-no-".repeat(12)}<b>not html</b>`;
  const died = Date.now();
  // The call the worker names with its error (a long URL must wrap on a phone).
  const firstCall = `GET https://reports.example/v1/jobs/narrow-dead-${run}-${"z".repeat(120)}%20polls%3D1`;
  // Its history as the queue writes it (newest first): two claims, each ended by an error.
  const hist = `{repoll}:h:${taskId(deadQuery)}`;
  redisPipe([
    ...deadTaskLines(deadQuery, deadError, died),
    `RPUSH ${hist} ${quote(`${died}|dead|max_attempts: after 2 attempts`)} ${quote(`${died}|error|${deadError}`)} ${quote(`${died - 1_500}|claimed|by narrow-worker-2 token 9`)} ${quote(`${died - 20_000}|error|${firstCall}: timeout after 3000 ms -> retry at ${died - 2_000} (attempt 1)`)} ${quote(`${died - 23_000}|claimed|by narrow-worker-1 token 8`)}`,
  ]);
  const waitingQuery = `narrow-waiting-${run} polls=1`;
  const waitingId = taskId(waitingQuery);
  const later = Date.now() + 3_600_000;
  redisPipe([
    `HSET {repoll}:t:${waitingId} q ${quote(waitingQuery)} s due c ${Date.now()} a 2 m 5 e ${quote("HTTP 500 " + "w".repeat(150))}`,
    `ZADD {repoll}:due ${later} ${waitingId}`,
    `ZADD {repoll}:retry ${later} ${waitingId}`,
  ]);
  try {
    await expect(async () => {
      expect((await (await request.get(`/api/v1/queries/${doneId}`)).json()).status).toBe("done");
    }).toPass({ timeout: 20_000 });

    await noSidewaysScroll(page, "/", async () => {
      await expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true");
    });
    await noSidewaysScroll(page, `/q/${doneId}`, async () => {
      await expect(page.getByTestId("query-status")).toHaveText("done");
    });
    await shot(page, "phone-query", true);
    await noSidewaysScroll(page, "/admin/login", async () => {
      await expect(page.getByTestId("login-password")).toBeVisible();
    });
    await signIn(page);
    await noSidewaysScroll(page, "/admin", async () => {
      await waitLive(page);
      await expect(page.getByTestId("counts")).toBeVisible();
      // The audit table when earlier tests acted, its empty note when this test runs alone.
      await expect(page.getByTestId("audit").or(page.getByTestId("audit-empty")).first()).toBeVisible();
    });
    await shot(page, "phone-overview", true);
    await noSidewaysScroll(page, "/admin/upstreams", async () => {
      await waitLive(page);
      await expect(page.getByTestId("upstreams-table")).toBeVisible();
    });
    await noSidewaysScroll(page, "/admin?window=24h", async () => {
      await waitLive(page);
      await expect(page.getByTestId("ttr-chart")).toBeVisible();
    });
    await noSidewaysScroll(page, "/admin?window=7d", async () => {
      await waitLive(page);
      await expect(page.getByTestId("latency-chart")).toBeVisible();
      await expect(page.getByTestId("polls-chart")).toBeVisible();
    });
    for (const state of ["ready", "waiting", "leased", "dead", "results"]) {
      await noSidewaysScroll(page, `/admin/tasks?state=${state}`, async () => {
        await waitLive(page);
        await expect(page.getByTestId("listing-total")).toBeVisible();
      });
      if (state === "dead") await shot(page, "phone-tasks-dead", true);
    }
    await noSidewaysScroll(page, `/admin/tasks?q=${encodeURIComponent(`${long} polls=1`)}`, async () => {
      await expect(page.locator(`[data-testid=task-row][data-id="${doneId}"]`)).toBeVisible();
    });
    for (const id of [taskId(deadQuery), waitingId, doneId]) {
      await noSidewaysScroll(page, `/admin/tasks/${id}`, async () => {
        await waitLive(page);
        await expect(page.getByTestId("timeline")).toBeAttached();
      });
    }
    // The dead task's failed attempts, newest first, each error in full (as text, not HTML).
    await page.goto(`/admin/tasks/${taskId(deadQuery)}`);
    const attempts = page.getByTestId("attempt-row");
    await expect(attempts).toHaveCount(2);
    await expect(attempts.nth(0).getByTestId("attempt-error")).toHaveText(deadError);
    await expect(attempts.nth(0)).toContainText("narrow-worker-2");
    await expect(attempts.nth(0)).toContainText("gave up");
    await expect(attempts.nth(1).getByTestId("attempt-error")).toHaveText("timeout after 3000 ms");
    await expect(attempts.nth(1).getByTestId("attempt-call")).toHaveText(firstCall);
    await expect(attempts.nth(0).getByTestId("attempt-call")).toHaveText("—");
    await expect(attempts.nth(1)).toContainText("narrow-worker-1");
    await expect(page.getByTestId("attempts").locator("b")).toHaveCount(0);
    await shot(page, "phone-task-attempts", true);
    await noSidewaysScroll(page, "/admin/leases?within=120000", async () => {
      await waitLive(page);
      await expect(page.locator("h1")).toContainText("eases");
    });
    await noSidewaysScroll(page, `/admin/bulk?state=dead&error=${encodeURIComponent("upstream-said-no")}`, async () => {
      await waitLive(page);
      await expect(page.getByTestId("bulk-count")).toBeVisible();
    });
    await shot(page, "phone-bulk", true);
  } finally {
    redis("ZREM", "{repoll}:due", waitingId);
    redis("ZREM", "{repoll}:retry", waitingId);
    redis("DEL", `{repoll}:t:${waitingId}`);
    redis("ZREM", "{repoll}:dead", taskId(deadQuery));
    redis("DEL", `{repoll}:t:${taskId(deadQuery)}`, hist);
    await context.close();
  }
  expect(errors).toEqual([]);
});

test("dark mode follows the system setting", async ({ browser }) => {
  for (const scheme of ["light", "dark"] as const) {
    const context = await browser.newContext({ colorScheme: scheme });
    const page = await context.newPage();
    const errors = watchErrors(page);
    await page.goto("/");
    await expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true");
    const bg = await background(page);
    expect(bg[3]).toBeGreaterThan(0);
    if (scheme === "dark") expect(luminance(bg), `dark background ${bg}`).toBeLessThan(0.1);
    else expect(luminance(bg), `light background ${bg}`).toBeGreaterThan(0.6);
    await shot(page, `${scheme}-query`, scheme === "dark");
    await signIn(page);
    await expect(page.getByTestId("counts")).toBeVisible();
    const adminBg = await background(page);
    if (scheme === "dark") expect(luminance(adminBg)).toBeLessThan(0.1);
    else expect(luminance(adminBg)).toBeGreaterThan(0.6);
    await shot(page, `${scheme}-overview`, scheme === "dark");
    expect(errors).toEqual([]);
    await context.close();
  }
});

test("bulk retry of 2,000 dead tasks picked by error text: the count first, a progress bar to 100 %, one audit entry", async ({
  page,
}) => {
  test.setTimeout(180_000);
  const errors = watchErrors(page);
  const marker = `bulk-${run}`;
  const at = Date.now();
  const lines: string[] = [];
  const ids: string[] = [];
  for (let i = 0; i < 2000; i++) {
    const query = `${marker}-${i} polls=1`;
    ids.push(taskId(query));
    lines.push(...deadTaskLines(query, `HTTP 503 Service Unavailable (${marker})`, at));
  }
  // Same run, another error: the filter must leave them dead.
  const decoys = Array.from({ length: 5 }, (_, i) => `${marker}-decoy-${i} polls=1`);
  for (const q of decoys) lines.push(...deadTaskLines(q, "HTTP 404 Not Found", at));
  redisPipe(lines);
  // How many of `list` are dead now, read in one redis-cli call.
  const deadOf = (list: string[]) =>
    redisPipe(list.map((id) => `HGET {repoll}:t:${id} s`))
      .split("\n")
      .filter((l) => l.trim() === "dead").length;
  expect(deadOf(ids.slice(0, 20))).toBe(20);

  await signIn(page);
  // From the dead tab of the task list to the filter, with the state already chosen.
  await page.goto("/admin/tasks?state=dead");
  await waitLive(page);
  await page.getByTestId("bulk-link").click();
  await expect(page).toHaveURL(/\/admin\/bulk\?state=dead$/);
  await waitLive(page);
  await page.getByTestId("bulk-error").fill(marker);
  await page.getByTestId("bulk-count-submit").click();
  await expect(page).toHaveURL(new RegExp(`error=${marker}`));
  // The count before anything is done; the button names it.
  await expect(page.getByTestId("bulk-count")).toHaveAttribute("data-count", "2000");
  await expect(page.getByTestId("bulk-count")).toHaveText("2000 tasks match");
  await expect(page.getByTestId("bulk-retry")).toHaveText("Retry 2000 tasks");
  expect(deadOf(ids.slice(0, 20))).toBe(20);
  await shot(page, "admin-bulk-count", true);

  await page.getByTestId("bulk-retry").click();
  await expect(page.getByTestId("bulk-result")).toHaveText("started: retry 2000 tasks");
  const progress = page.getByTestId("bulk-progress");
  await expect(progress).toHaveAttribute("data-state", "finished", { timeout: 60_000 });
  await expect(progress).toHaveAttribute("data-done", "2000");
  await expect(progress).toHaveAttribute("data-total", "2000");
  await expect(progress.locator("progress")).toHaveAttribute("value", "100.0");
  await expect(progress.getByTestId("progress")).toContainText("100 %");
  await expect(page.getByTestId("bulk-summary")).toContainText("2000 of 2000 gone through, 2000 changed");
  await shot(page, "admin-bulk-done", true);

  // In Redis: none of the 2,000 is dead any more (ready, claimed or already done); the
  // decoys are untouched; the run's record says the same.
  expect(deadOf(ids)).toBe(0);
  expect(deadOf(decoys.map(taskId))).toBe(decoys.length);
  const stored = redis("HGET", "{repoll}:bulk", "changed");
  expect(stored).toBe("2000");
  const started = Number(redis("HGET", "{repoll}:bulk", "started"));
  const ended = Number(redis("HGET", "{repoll}:bulk", "ended"));
  const rate = Math.round((2000 * 1000) / Math.max(1, ended - started));
  test.info().annotations.push({ type: "bulk retry rate", description: `2000 tasks in ${ended - started} ms: ${rate} tasks/s` });
  console.log(`bulk retry: 2000 tasks in ${ended - started} ms (${rate} tasks/s)`);

  // One audit entry with the filter and the count.
  await page.goto("/admin");
  await waitLive(page);
  const entry = page.getByTestId("audit").locator("tr", { hasText: marker });
  await expect(entry).toHaveCount(1);
  await expect(entry).toContainText("bulk retry");
  await expect(entry).toContainText(`dead, error contains "${marker}"`);
  await expect(entry.locator("td").nth(4)).toHaveText("2000");
  // The retried tasks run (polls=1: done at the first call): results appear for them.
  await expect
    .poll(() => Number(redis("EXISTS", ...ids.slice(0, 500).map((id) => `{repoll}:r:${id}`))), {
      timeout: 60_000,
    })
    .toBeGreaterThan(0);
  // Clean up the decoys for later tests.
  for (const q of decoys) {
    redis("ZREM", "{repoll}:dead", taskId(q));
    redis("DEL", `{repoll}:t:${taskId(q)}`);
  }
  expect(errors).toEqual([]);
});

test("Stop in the browser ends a running bulk retry after its chunk: the rest stay dead, the audit says where", async ({
  page,
}) => {
  test.setTimeout(180_000);
  const errors = watchErrors(page);
  const marker = `bulk-stop-${run}`;
  const at = Date.now();
  // Three chunks (queue::bulk::BULK_CHUNK is 100 tasks).
  const total = 300;
  const ids: string[] = [];
  const lines: string[] = [];
  for (let i = 0; i < total; i++) {
    const query = `${marker}-${i} polls=1`;
    ids.push(taskId(query));
    lines.push(...deadTaskLines(query, `HTTP 502 Bad Gateway (${marker})`, at));
  }
  redisPipe(lines);
  const deadOf = (list: string[]) =>
    redisPipe(list.map((id) => `HGET {repoll}:t:${id} s`))
      .split("\n")
      .filter((l) => l.trim() === "dead").length;
  expect(deadOf(ids)).toBe(total);

  // A run takes milliseconds, too fast to click Stop in. So it is started on a web process of
  // its own whose Redis connection goes through a proxy that holds its commands right after
  // the first chunk's progress write (`HSET {repoll}:bulk done 100`): the run is frozen
  // between two chunks, before its next stop check, for as long as the test needs (60 s
  // Redis timeout there). Stop is clicked on the suite's server (another process, its own
  // connection), then the proxy lets the held commands through.
  const proxy = await redisProxy({ holdAfter: Buffer.from("{repoll}:bulk\r\n$4\r\ndone\r\n") });
  const web = await spawnServe({ REDIS_URL: proxy.url, REPOLL_REDIS_REQUEST_TIMEOUT_MS: "60000" });
  const filterPath = `/admin/bulk?state=dead&error=${marker}`;
  try {
    await signIn(page);
    // The session cookie is the host's (any port), the session in the shared Redis.
    await page.goto(`${web.url}${filterPath}`);
    await waitLive(page);
    await expect(page.getByTestId("bulk-count")).toHaveAttribute("data-count", String(total));
    await page.getByTestId("bulk-retry").click();
    await expect(page.getByTestId("bulk-result")).toHaveText(`started: retry ${total} tasks`);
    let guard: NodeJS.Timeout | undefined;
    await Promise.race([
      proxy.held,
      new Promise((_, reject) => {
        guard = setTimeout(() => reject(new Error("the run never wrote its first chunk's progress")), 60_000);
      }),
    ]).finally(() => clearTimeout(guard));
    // The held write itself was sent: Redis gets it (waited for, not assumed).
    await expect.poll(() => redis("HGET", "{repoll}:bulk", "done"), { timeout: 10_000 }).toBe("100");
    expect(redis("HGET", "{repoll}:bulk", "state")).toBe("running");
    expect(deadOf(ids)).toBe(total - 100);

    await page.goto(filterPath);
    await waitLive(page);
    const progress = page.getByTestId("bulk-progress");
    await expect(progress).toHaveAttribute("data-state", "running");
    await expect(progress).toHaveAttribute("data-done", "100");
    await page.getByTestId("bulk-stop").click();
    await expect(page.getByTestId("bulk-result")).toHaveText("stopping after the current chunk");
    await expect(page.getByTestId("bulk-summary")).toContainText("— stopping");
    expect(redis("HGET", "{repoll}:bulk", "stop")).toBe("1");

    // The run goes on: its next stop check sees the request.
    proxy.release();
    await expect(progress).toHaveAttribute("data-state", "stopped", { timeout: 60_000 });
    await expect(progress).toHaveAttribute("data-done", "100");
    await expect(progress).toHaveAttribute("data-total", String(total));
    await expect(page.getByTestId("bulk-summary")).toContainText(`100 of ${total} gone through, 100 changed — stopped`);
    await expect(page.getByTestId("bulk-stop")).toHaveCount(0);
    // In Redis: one chunk retried, the other two untouched.
    expect(deadOf(ids)).toBe(total - 100);
    expect(redis("HGET", "{repoll}:bulk", "done")).toBe("100");
    expect(redis("HGET", "{repoll}:bulk", "changed")).toBe("100");

    // One audit entry saying where it stopped (written by the process that ran it, once the
    // run has ended: waited for, then read on the page).
    await page.goto("/admin");
    await waitLive(page);
    const entry = page.getByTestId("audit").locator("tr", { hasText: marker });
    await expect(entry).toHaveCount(1, { timeout: 20_000 });
    await expect(entry).toContainText("bulk retry");
    await expect(entry).toContainText(`(stopped after 100 of ${total})`);
    await expect(entry.locator("td").nth(4)).toHaveText("100");
    expect(errors).toEqual([]);
  } finally {
    proxy.release();
    await web.stop();
    await proxy.close();
    // The ones still dead go (the retried ones are the workers' now).
    const states = redisPipe(ids.map((id) => `HGET {repoll}:t:${id} s`)).split("\n");
    const dead = ids.filter((_, i) => states[i]?.trim() === "dead");
    if (dead.length > 0) {
      redisPipe([`ZREM {repoll}:dead ${dead.join(" ")}`, `DEL ${dead.map((id) => `{repoll}:t:${id}`).join(" ")}`]);
    }
  }
});

test("a bulk purge needs the count typed: one click purges nothing", async ({ page }) => {
  const errors = watchErrors(page);
  const marker = `typed-${run}`;
  const at = Date.now();
  const queries = [0, 1, 2].map((i) => `${marker}-${i} polls=1`);
  const ids = queries.map(taskId);
  redisPipe(queries.flatMap((q) => deadTaskLines(q, `HTTP 500 (${marker})`, at)));
  const deadNow = () =>
    redisPipe(ids.map((id) => `HGET {repoll}:t:${id} s`))
      .split("\n")
      .filter((l) => l.trim() === "dead").length;
  await signIn(page);
  await page.goto(`/admin/bulk?state=dead&error=${marker}`);
  await waitLive(page);
  await expect(page.getByTestId("bulk-count")).toHaveAttribute("data-count", "3");
  // One click: the form is held until the count is typed; nothing is sent, nothing purged.
  await page.getByTestId("bulk-purge").click();
  const typed = page.getByTestId("bulk-purge-typed");
  expect(await typed.evaluate((e: HTMLInputElement) => e.validity.valueMissing)).toBe(true);
  await typed.fill("2");
  await page.getByTestId("bulk-purge").click();
  expect(await typed.evaluate((e: HTMLInputElement) => e.validity.patternMismatch)).toBe(true);
  await expect(page.getByTestId("bulk-result")).not.toContainText("started");
  expect(deadNow()).toBe(3);
  // The count typed: the run starts and purges the three.
  await typed.fill("3");
  await page.getByTestId("bulk-purge").click();
  await expect(page.getByTestId("bulk-result")).toHaveText("started: purge 3 tasks");
  await expect.poll(deadNow).toBe(0);
  expect(errors).toEqual([]);
});

test("a filter matching more than the per-action limit shows the count and the limit, and offers no action", async ({
  page,
}) => {
  test.setTimeout(120_000);
  const errors = watchErrors(page);
  // One more than the default limit (REPOLL_BULK_LIMIT, 10,000; the e2e server keeps it).
  const marker = `over-${run}`;
  const at = Date.now();
  const ids: string[] = [];
  const lines: string[] = [];
  for (let i = 0; i < 10_001; i++) {
    const query = `${marker}-${i} polls=1`;
    ids.push(taskId(query));
    lines.push(...deadTaskLines(query, `HTTP 500 (${marker})`, at));
  }
  redisPipe(lines);
  try {
    await signIn(page);
    await page.goto(`/admin/bulk?state=dead&error=${marker}`);
    await waitLive(page);
    await expect(page.getByTestId("bulk-count")).toHaveAttribute("data-count", "10001");
    await expect(page.getByTestId("bulk-over-limit")).toContainText("the limit is 10000 tasks");
    await expect(page.getByTestId("bulk-over-limit")).toContainText("REPOLL_BULK_LIMIT");
    for (const op of ["retry", "cancel", "purge"]) await expect(page.getByTestId(`bulk-${op}`)).toHaveCount(0);
    // Narrowed below the limit (a query-text filter), the actions are offered again.
    await page.goto(`/admin/bulk?state=dead&error=${marker}&query=${marker}-999`);
    await expect(page.getByTestId("bulk-count")).toHaveAttribute("data-count", "11");
    await expect(page.getByTestId("bulk-purge")).toHaveText("Purge 11 tasks");
  } finally {
    const del: string[] = [];
    for (let i = 0; i < ids.length; i += 500) {
      const chunk = ids.slice(i, i + 500);
      del.push(`ZREM {repoll}:dead ${chunk.join(" ")}`);
      del.push(`DEL ${chunk.map((id) => `{repoll}:t:${id}`).join(" ")}`);
    }
    redisPipe(del);
  }
  expect(errors).toEqual([]);
});

test("search with qualifiers finds across states, and plain text finds part of a query", async ({ page }) => {
  const errors = watchErrors(page);
  const marker = `search-${run}`;
  const at = Date.now();
  const e500 = [0, 1, 2].map((i) => `${marker}-five-${i} polls=1`);
  const e404 = [0, 1].map((i) => `${marker}-four-${i} polls=1`);
  redisPipe([
    ...e500.flatMap((q) => deadTaskLines(q, "HTTP 500 Internal Server Error", at)),
    ...e404.flatMap((q) => deadTaskLines(q, "HTTP 404 Not Found", at)),
  ]);
  await signIn(page);
  const rows = async () =>
    (await page.getByTestId("task-row").evaluateAll((els) => els.map((e) => e.getAttribute("data-id")))).sort();
  const search = async (text: string) => {
    await page.goto(`/admin/tasks?q=${encodeURIComponent(text)}`);
    await waitLive(page);
  };

  // Two qualifiers (and a third narrowing to this test's tasks).
  await search(`state:dead error:"HTTP 500" query:${marker}`);
  await expect(page.getByTestId("task-row")).toHaveCount(3);
  expect(await rows()).toEqual(e500.map(taskId).sort());
  await expect(page.getByText(/3 matches among \d+ tasks? looked at \(dead\)/)).toBeVisible();

  // Without state: every state is looked in.
  await search(`error:"HTTP 404" query:${marker}`);
  await expect(page.getByTestId("task-row")).toHaveCount(2);
  expect(await rows()).toEqual(e404.map(taskId).sort());

  // Plain text that is no whole query: part of the query text.
  await search(`${marker}-four-1`);
  await expect(page.getByTestId("task-row")).toHaveCount(1);
  expect(await rows()).toEqual([taskId(e404[1])]);
  expect(errors).toEqual([]);
});

test("without JavaScript an admin action's result is shown after the reload, once", async ({
  browser,
}: {
  browser: Browser;
}) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  try {
    await page.goto("/admin/login");
    await page.getByTestId("login-password").fill(adminPassword);
    await page.getByTestId("login-submit").click();
    await page.goto("/admin");
    await expect(page.getByTestId("counts")).toBeVisible();
    await expect(page.getByTestId("action-result")).toHaveText("");

    // Post, 303 back to the page, and the page says what the action did.
    await page.getByTestId("pause").click();
    await expect(page).toHaveURL(/\/admin\??$/);
    await expect(page.getByTestId("action-result")).toHaveText("paused: workers claim nothing until resumed");
    expect(redis("EXISTS", "{repoll}:paused").trim()).toBe("1");
    // Once: the next load of the page no longer shows it.
    await page.reload();
    await expect(page.getByTestId("action-result")).toHaveText("");

    await page.getByTestId("resume").click();
    await expect(page.getByTestId("action-result")).toHaveText("resumed");
    expect(redis("EXISTS", "{repoll}:paused").trim()).toBe("0");
    // The pause and the resume are marked on the charts, in every window.
    const words: Record<string, string> = { "1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days" };
    for (const window of ["1h", "24h", "7d"]) {
      await page.goto(`/admin?window=${window}`);
      await expect(page.getByTestId("chart-window").locator("[aria-current=page]")).toHaveText(words[window]);
      // A CSS locator: the markers are SVG groups.
      const labels = await page.locator("[data-testid=throughput-chart] [data-testid=chart-marker]").allTextContents();
      expect(labels.join(" ")).toContain("paused");
      expect(labels.join(" ")).toContain("resumed");
    }
  } finally {
    redis("DEL", "{repoll}:paused");
    await context.close();
  }
});

test("the overview charts p50/p95/p99 of real upstream calls, time to result and polls per task", async ({
  page,
  request,
}) => {
  const run = Date.now();
  const id = await submit(request, `percentiles-${run} polls=2`);
  await expect(async () => {
    expect((await (await request.get(`/api/v1/queries/${id}`)).json()).status).toBe("done");
  }).toPass({ timeout: 30_000 });
  await signIn(page);
  await page.goto("/admin");
  await waitLive(page);
  for (const [chart, words] of [
    ["latency-chart", "upstream call latency p50"],
    ["ttr-chart", "time to result p50"],
    ["polls-chart", "polls per task p50"],
  ]) {
    // CSS locators: the lines and their tooltips are SVG elements.
    await expect(page.locator(`[data-testid=${chart}] .s-p95`).first()).toBeAttached();
    const tips = await page.locator(`[data-testid=${chart}] .tips title`).allTextContents();
    expect(tips.some((t) => t.includes(words)), `${chart}: ${tips.slice(-3).join(" | ")}`).toBe(true);
  }

  // The p99 line is drawn with its value, not only named. A minute 50 minutes ago (before this
  // run's Redis started: nothing real in it) gets 100 tasks' polls in the queue's own layout
  // (prelude.lua bump_tally: field "<minute>:p<bucket>" of {repoll}:tp, indexed in
  // {repoll}:tpmin; below 16 a bucket is its value): 98 took 3 polls, 2 took 12. Nearest rank:
  // p50 = p95 = 3, p99 = 12 (the 99th of 100).
  const [secs] = redis("TIME").split("\n");
  const minute = Math.floor(Number(secs) / 60) * 60_000 - 50 * 60_000;
  expect(redis("ZRANGEBYSCORE", "{repoll}:tpmin", String(minute), String(minute)), "the fixture minute is empty").toBe("");
  const fields = [`${minute}:p3`, `${minute}:p12`];
  redisPipe([
    `HINCRBY {repoll}:tp ${fields[0]} 98`,
    `HINCRBY {repoll}:tp ${fields[1]} 2`,
    `ZADD {repoll}:tpmin ${minute} ${fields[0]} ${minute} ${fields[1]}`,
  ]);
  try {
    await page.goto("/admin");
    await waitLive(page);
    const hhmm = new Date(minute).toISOString().slice(11, 16);
    const tip = `${hhmm} UTC · polls per task p50 3, p95 3, p99 12 over 100 completed`;
    // Read from the SVG: the minute's hover band (its x), the marks drawn there per series (a
    // lone minute is a circle), and the y axis (value → y from its labelled grid lines).
    const drawn = await page.getByTestId("polls-chart").evaluate((fig, tip) => {
      const num = (e: Element, a: string) => Number(e.getAttribute(a));
      const band = [...fig.querySelectorAll(".tips rect")].find((r) => r.querySelector("title")?.textContent === tip);
      if (!band) return null;
      const x = num(band, "x") + num(band, "width") / 2;
      const at = (cls: string) =>
        [...fig.querySelectorAll(`.${cls}`)]
          .filter((c) => c.tagName === "circle" && Math.abs(num(c, "cx") - x) <= 0.2)
          .map((c) => num(c, "cy"));
      // Each label sits 3.5 below its grid line (chart.rs y_axis).
      const ticks = [...fig.querySelectorAll(".y-axis text")].map((t) => ({
        v: Number(t.textContent),
        y: num(t, "y") - 3.5,
      }));
      return { p50: at("s-p50"), p95: at("s-p95"), p99: at("s-p99"), ticks };
    }, tip);
    expect(drawn, `no hover band titled "${tip}"`).not.toBeNull();
    const { ticks } = drawn!;
    const zero = ticks.find((t) => t.v === 0)!;
    const top = ticks[ticks.length - 1];
    expect(top.v).toBeGreaterThanOrEqual(12);
    const y = (v: number) => zero.y + ((top.y - zero.y) * v) / top.v;
    // One p99 mark at the minute, at 12 on the axis; p50 and p95 at 3 (coordinates have one
    // decimal in the markup).
    expect(drawn!.p99).toHaveLength(1);
    expect(Math.abs(drawn!.p99[0] - y(12)), `p99 at y ${drawn!.p99[0]}, 12 is at ${y(12)}`).toBeLessThanOrEqual(0.15);
    for (const low of [drawn!.p50, drawn!.p95]) {
      expect(low).toHaveLength(1);
      expect(Math.abs(low[0] - y(3))).toBeLessThanOrEqual(0.15);
    }
  } finally {
    redis("HDEL", "{repoll}:tp", ...fields);
    redis("ZREM", "{repoll}:tpmin", ...fields);
  }
});
