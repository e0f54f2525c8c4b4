import { test, expect } from "@playwright/test";
import { redis, redisProxy, signIn, spawnServe, waitLive, watchErrors } from "./support";
import { shot, redisPipe, taskId, deadTaskLines, submit } from "./fixtures";

// Bulk actions in the browser: a large retry picked by error text with its progress and audit
// entry, Stop between chunks, a purge that needs the count typed, the per-action limit.

const run = Date.now();

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
