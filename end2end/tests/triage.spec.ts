// Issue 29, "act on chosen rows" and "triage": ticking rows of the task list and acting on
// exactly those, the typed count a purge of them needs, the facet counts beside the list,
// and the dead work grouped by error.
import { test, expect, Page } from "@playwright/test";
import { execFileSync } from "child_process";
import { createHash } from "crypto";
import { shot } from "./fixtures";
import { redisUrl, signIn, waitLive, watchErrors } from "./support";

const run = Date.now();

function redisPipe(lines: string[]): string {
  return execFileSync("redis-cli", ["--no-auth-warning", "-u", redisUrl], {
    input: lines.join("\n") + "\n",
    maxBuffer: 64 * 1024 * 1024,
  }).toString();
}

/** The queue's id of a query already in normal form. */
function taskId(query: string): string {
  return createHash("sha256").update(query).digest("hex").slice(0, 32);
}

const quote = (s: string) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

/** Dead tasks of `queries` that died with `error` at `at`; their ids. */
function deadTasks(queries: string[], error: string, at: number, tenant = ""): string[] {
  const lines: string[] = [];
  for (const q of queries) {
    const id = taskId(q);
    const tn = tenant ? ` tn ${tenant}` : "";
    lines.push(
      `HSET {repoll}:t:${id} q ${quote(q)} s dead c ${at - 60_000} u ${at} a 5 m 5 e ${quote(error)} dr max_attempts${tn}`,
      `ZADD {repoll}:dead ${at} ${id}`,
    );
  }
  redisPipe(lines);
  return queries.map(taskId);
}

/** Each id's record state ("" when the task is gone). */
function statesOf(ids: string[]): string[] {
  return redisPipe(ids.map((id) => `HGET {repoll}:t:${id} s`))
    .split("\n")
    .slice(0, ids.length)
    .map((l) => l.trim());
}

const row = (page: Page, id: string) => page.locator(`tr[data-id="${id}"]`);

test("ticking two of N rows and retrying them retries exactly those two", async ({ page }) => {
  const errors = watchErrors(page);
  const marker = `tick-${run}`;
  const ids = deadTasks([0, 1, 2, 3].map((i) => `${marker}-${i} polls=1`), "HTTP 503 (tick)", Date.now());
  await signIn(page);
  await page.goto(`/admin/tasks?q=${encodeURIComponent(`state:dead query:${marker}`)}`);
  await waitLive(page);
  await expect(page.getByTestId("task-row")).toHaveCount(4);
  await expect(page.getByTestId("selection-count")).toHaveText("0 ticked");
  await expect(page.getByTestId("selection-submit")).toBeDisabled();
  await row(page, ids[1]).getByTestId("row-select").check();
  await row(page, ids[3]).getByTestId("row-select").check();
  await expect(page.getByTestId("selection-count")).toHaveText("2 ticked");
  await expect(page.getByTestId("selection-submit")).toHaveText("Retry 2 tasks selected");
  await page.getByTestId("selection-submit").click();
  await expect(page.getByTestId("selection-result")).toHaveText("started: retry 2 tasks");
  // The run is the server's: wait for the two to leave the dead set.
  await expect.poll(() => statesOf(ids).map((s) => s === "dead"), { timeout: 30_000 }).toEqual([true, false, true, false]);
  // Issue 43, row 5: the run says what it did once it has ended, without a reload.
  await expect(page.getByTestId("bulk-run-done")).toHaveText("done: 2 retried", { timeout: 15_000 });
  // The box for every row of the page ticks what is left.
  await expect(page.getByTestId("task-row")).toHaveCount(2);
  await page.getByTestId("select-page").check();
  await expect(page.getByTestId("selection-count")).toHaveText("2 ticked");
  expect(errors).toEqual([]);
});

test("a purge of ticked rows needs their number typed; one click purges nothing", async ({ page }) => {
  const errors = watchErrors(page);
  const marker = `purge-${run}`;
  const ids = deadTasks([0, 1, 2].map((i) => `${marker}-${i} polls=1`), "HTTP 500 (purge)", Date.now());
  await signIn(page);
  await page.goto(`/admin/tasks?q=${encodeURIComponent(`state:dead query:${marker}`)}`);
  await waitLive(page);
  await row(page, ids[0]).getByTestId("row-select").check();
  await row(page, ids[2]).getByTestId("row-select").check();
  await page.getByTestId("selection-op").selectOption("purge");
  await expect(page.getByTestId("selection-submit")).toHaveText("Purge 2 tasks selected");
  // One click: the browser holds the form (the typed count is required), nothing is sent.
  await page.getByTestId("selection-submit").click();
  expect(await page.getByTestId("selection-typed").evaluate((e) => (e as HTMLInputElement).validity.valid)).toBe(false);
  await expect(page.getByTestId("selection-result")).toHaveText("");
  expect(statesOf(ids)).toEqual(["dead", "dead", "dead"]);
  // Another number is not it either.
  await page.getByTestId("selection-typed").fill("3");
  await page.getByTestId("selection-submit").click();
  expect(await page.getByTestId("selection-typed").evaluate((e) => (e as HTMLInputElement).validity.valid)).toBe(false);
  expect(statesOf(ids)).toEqual(["dead", "dead", "dead"]);
  await page.getByTestId("selection-typed").fill("2");
  await page.getByTestId("selection-submit").click();
  await expect(page.getByTestId("selection-result")).toHaveText("started: purge 2 tasks");
  await expect.poll(() => statesOf(ids), { timeout: 30_000 }).toEqual(["", "dead", ""]);
  await expect(page.getByTestId("bulk-run-done")).toHaveText("done: 2 purged", { timeout: 15_000 });
  expect(errors).toEqual([]);
});

/** `run` in letters only: the dead work view shows numbers as #, so a marker must have none. */
const letters = String(run).replace(/\d/g, (d) => "abcdefghij"[Number(d)]);

test("a facet link narrows the list to the tasks it counted", async ({ page }) => {
  const errors = watchErrors(page);
  const tenant = `tri-${run}`;
  const now = Date.now();
  deadTasks([0, 1, 2].map((i) => `facet-${run}-a${i} polls=1`), "HTTP 502: bad gateway", now, tenant);
  deadTasks([0, 1].map((i) => `facet-${run}-b${i} polls=1`), "timeout after 10 ms", now, tenant);
  await signIn(page);
  await page.goto(`/admin/tasks?q=${encodeURIComponent(`state:dead tenant:${tenant}`)}`);
  await waitLive(page);
  await expect(page.getByTestId("task-row")).toHaveCount(5);
  const facet = (key: string) => page.locator(`[data-testid="facets"] li:has([data-facet="class"][data-key="${key}"])`);
  await expect(facet("http-502").getByTestId("facet-count")).toHaveText("3");
  await expect(facet("timeout").getByTestId("facet-count")).toHaveText("2");
  await facet("http-502").getByTestId("facet-link").click();
  await expect(page).toHaveURL(/class%3Ahttp-502/);
  await expect(page.getByTestId("task-row")).toHaveCount(3);
  for (const e of await page.getByTestId("row-error").allTextContents()) expect(e).toContain("HTTP 502");
  // The narrowed list's own panel counts the same 3.
  await expect(facet("http-502").getByTestId("facet-count")).toHaveText("3");
  expect(errors).toEqual([]);
});

test("the dead work view groups by error and retries only the chosen group", async ({ page }) => {
  const errors = watchErrors(page);
  const now = Date.now();
  const busy = deadTasks([0, 1, 2].map((i) => `group-${run}-busy${i} polls=1`), "", 0);
  // Same group although their numbers differ; another group beside it.
  redisPipe(busy.map((id, i) => `HSET {repoll}:t:${id} s dead e ${quote(`HTTP 503: ${letters} busy, retry in ${5 + i * 7} s`)} u ${now - i * 1000}`));
  redisPipe(busy.map((id, i) => `ZADD {repoll}:dead ${now - i * 1000} ${id}`));
  const other = deadTasks([0, 1].map((i) => `group-${run}-other${i} polls=1`), `HTTP 503: ${letters} other`, now);
  await signIn(page);
  await page.goto("/admin/tasks?state=dead");
  await waitLive(page);
  await page.getByTestId("dead-work-link").click();
  await expect(page).toHaveURL(/\/admin\/dead$/);
  await waitLive(page);
  const group = (text: string) => page.locator(`[data-testid="dead-group"]:has(td.message:text-is("${text}"))`);
  await expect(group(`HTTP 503: ${letters} busy, retry in # s`)).toHaveAttribute("data-count", "3");
  await expect(group(`HTTP 503: ${letters} other`)).toHaveAttribute("data-count", "2");
  await group(`HTTP 503: ${letters} busy, retry in # s`).getByTestId("group-retry").click();
  await expect(page).toHaveURL(/\/admin\/bulk\?state=dead&group=[0-9a-f]{16}$/);
  await waitLive(page);
  await expect(page.getByTestId("bulk-count")).toHaveAttribute("data-count", "3");
  await page.getByTestId("bulk-retry").click();
  await expect(page.getByTestId("bulk-result")).toHaveText("started: retry 3 tasks");
  await expect.poll(() => statesOf([...busy, ...other]).map((s) => s === "dead"), { timeout: 30_000 })
    .toEqual([false, false, false, true, true]);
  expect(errors).toEqual([]);
});

test("dead rows are one line each at 1280 px, the table clear of the counts beside it", async ({ page }) => {
  // Issue 43 row 4 / "a dense triage table": the dead list at 1280 px read ~8 rows a screen
  // (80 px rows, the error's "GET http://…:" first) and ran under the facet sidebar's border.
  const errors = watchErrors(page);
  const now = Date.now();
  const marker = `dense${run}`;
  const ids = deadTasks(
    Array.from({ length: 12 }, (_, i) => `${marker}-${i} customer-report region-eu-west polls=3`),
    "GET http://127.0.0.1:4001/api/query?q=customer-report%20region-eu-west: HTTP 503 Service Unavailable: simulated outage, retry in 5 s",
    now,
  );
  await page.setViewportSize({ width: 1280, height: 900 });
  await signIn(page);
  await page.goto(`/admin/tasks?q=${encodeURIComponent(`state:dead query:${marker}`)}`);
  await waitLive(page);
  await expect(row(page, ids[0])).toBeVisible();
  const heights = await Promise.all(ids.map(async (id) => (await row(page, id).boundingBox())!.height));
  for (const h of heights) {
    expect(h, `row heights ${heights.join(", ")}`).toBeLessThanOrEqual(52);
  }
  const table = (await row(page, ids[0]).locator("xpath=ancestor::table[1]").boundingBox())!;
  const facets = (await page.getByTestId("facets").boundingBox())!;
  const apart =
    table.x + table.width <= facets.x + 1 ||
    facets.x + facets.width <= table.x + 1 ||
    facets.y + facets.height <= table.y + 1 ||
    table.y + table.height <= facets.y + 1;
  expect(apart, `table ${JSON.stringify(table)} facets ${JSON.stringify(facets)}`).toBe(true);
  await shot(page, "admin-tasks-dead", true);
  expect(errors).toEqual([]);
});
