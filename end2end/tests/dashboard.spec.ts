import { test, expect, Page, Browser } from "@playwright/test";
import { adminPassword, redis, signIn, waitLive, watchErrors } from "./support";
import { shot, redisPipe, taskId, deadTaskLines, submit } from "./fixtures";

// What the dashboard promises, checked in Chromium against the release build (`repoll serve
// --sim`, managed Redis on the e2e's private port): anonymous admin pages are a real HTTP
// redirect carrying no queue data; a user's mistake on the public form is a 4xx with the reason
// on the form, with and without JavaScript; a paused queue is visible on the user's query page;
// search with qualifiers; admin actions without JavaScript; the overview's charts.

const run = Date.now();

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
      // x is in percent of the width ("12.34%"), y in pixels (chart/scale.rs).
      const num = (e: Element, a: string) => parseFloat(e.getAttribute(a)!);
      const band = [...fig.querySelectorAll(".tips rect")].find((r) => r.querySelector("title")?.textContent === tip);
      if (!band) return null;
      const x = num(band, "x") + num(band, "width") / 2;
      const at = (cls: string) =>
        [...fig.querySelectorAll(`.${cls}`)]
          .filter((c) => c.tagName === "circle" && Math.abs(num(c, "cx") - x) <= 0.2)
          .map((c) => num(c, "cy"));
      // Each label sits 3.5 below its grid line (chart/parts.rs y_axis).
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
