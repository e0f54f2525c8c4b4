import { test, expect, Page, APIRequestContext } from "@playwright/test";
import { spawn, execFileSync, ChildProcess } from "child_process";
import * as fs from "fs";
import * as path from "path";

// The admin dashboard end to end: the real server (`repoll serve --sim`, 16 embedded worker
// slots, managed Redis) in headless Chromium, signed in with the e2e admin password. Tasks are
// created through the public API with simulator overrides in their keys (`fail=500
// fail_times=5` fails five times — enough to die with the default 5 attempts — and then
// succeeds, which is what "retry a dead task and watch it complete" needs), plus a per-run
// suffix because the e2e Redis lives for the whole run.
//
// The stuck lease is made by a real `repoll worker` process killed with SIGKILL while it
// holds a lease (60 s lease, upstream answering after 8 s). The web server's embedded workers
// (16 slots) compete for the same queue and usually win a race (the web process wakes them
// first), so the test submits 20 tasks at once: with 16 + 4 slots busy for 8 s, the doomed
// worker must hold some. Afterwards it waits until no lease is left, so the next tests find
// the embedded workers free.

const root = path.resolve(__dirname, "..", "..");
const redisUrl = process.env.E2E_REDIS_URL!;
const simUrl = process.env.E2E_SIM_URL!;
const adminPassword = "e2e-admin-password";
const run = Date.now();
const shotDir = path.join(__dirname, "..", "test-results", "screenshots");
const docsDir = path.join(root, "docs", "screenshots");

/** Page errors, console errors and failed requests; `expected` lists statuses a test
 * provokes on purpose (e.g. 400 for a purge without the typed confirmation). */
function watchErrors(page: Page, expected: number[] = []): string[] {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(`${page.url()}: ${String(e).slice(0, 120)}`));
  page.on("console", (m) => {
    // Failed requests are reported below with their URL instead.
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(m.text());
  });
  page.on("response", (r) => {
    if (r.status() >= 400 && !expected.includes(r.status())) errors.push(`HTTP ${r.status()} ${r.url()}`);
  });
  return errors;
}

/** Screenshot into test-results/screenshots and docs/screenshots (for the README). */
async function shot(page: Page, name: string) {
  fs.mkdirSync(shotDir, { recursive: true });
  fs.mkdirSync(docsDir, { recursive: true });
  const file = path.join(shotDir, `admin-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  fs.copyFileSync(file, path.join(docsDir, `admin-${name}.png`));
}

/** Creates (or joins) the task of `query` through the public API; returns its id. */
async function submit(request: APIRequestContext, query: string): Promise<string> {
  for (let i = 0; i < 30; i++) {
    const res = await request.post("/api/v1/queries", { data: { query } });
    if (res.status() === 429) {
      await new Promise((r) => setTimeout(r, 1000 * Number(res.headers()["retry-after"] ?? 1)));
      continue;
    }
    expect([200, 202]).toContain(res.status());
    return (await res.json()).id;
  }
  throw new Error("rate limited for too long");
}

async function apiStatus(request: APIRequestContext, id: string): Promise<{ status: string; polls: number }> {
  const res = await request.get(`/api/v1/queries/${id}`);
  return res.json();
}

function redis(...args: string[]): string {
  return execFileSync("redis-cli", ["--no-auth-warning", "-u", redisUrl, ...args]).toString().trim();
}

/** Waits for the live stream: proves the page hydrated and /admin/events is open. */
async function waitLive(page: Page) {
  await expect(page.getByTestId("live-indicator")).toHaveText("live", { timeout: 15_000 });
}

async function signIn(page: Page) {
  await page.goto("/admin/login");
  await page.getByTestId("login-password").fill(adminPassword);
  await page.getByTestId("login-submit").click();
  await expect(page).toHaveURL(/\/admin$/);
  await waitLive(page);
}

async function count(page: Page, name: string): Promise<number> {
  return Number(await page.getByTestId(`count-${name}`).textContent());
}

test("an anonymous visitor is sent to sign in; a wrong password gets one generic message", async ({ page }) => {
  const res = await page.goto("/admin/tasks");
  expect(res?.status()).toBe(200); // after the redirect
  await expect(page).toHaveURL(/\/admin\/login$/);
  await page.getByTestId("login-password").fill("not the password");
  await page.getByTestId("login-submit").click();
  await expect(page.getByTestId("login-error")).toHaveText("wrong password");
});

test("sign in, see counts; the overview updates live while tasks flow", async ({ page, request }) => {
  const errors = watchErrors(page);
  await signIn(page);
  await expect(page.getByTestId("counts")).toBeVisible();
  await expect(page.getByTestId("signed-in-as")).toContainText("admin");
  await expect(page.getByTestId("redis-ok")).toBeVisible();
  const before = await count(page, "results");
  // Three tasks flow through while the page stays open (no reload, no click).
  for (let i = 0; i < 3; i++) await submit(request, `admin-flow-${run}-${i} polls=2`);
  await expect(async () => {
    expect(await count(page, "results")).toBeGreaterThanOrEqual(before + 3);
  }).toPass({ timeout: 20_000 });
  await expect(page.getByTestId("workers")).toContainText("in flight");
  await shot(page, "overview");
  expect(errors).toEqual([]);
});

test("the task list pages newest first as well as oldest first", async ({ page, request }) => {
  const errors = watchErrors(page);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push(await submit(request, `admin-order-${run}-${i} polls=1`));
  await expect(async () => {
    for (const id of ids) expect((await apiStatus(request, id)).status).toBe("done");
  }).toPass({ timeout: 20_000 });
  await signIn(page);
  await page.goto("/admin/tasks?state=results");
  await waitLive(page);
  await expect(page.getByTestId("listing-total")).toContainText("(oldest first)");
  await page.getByTestId("order-toggle").click();
  await expect(page).toHaveURL(/state=results&order=newest/);
  await expect(page.getByTestId("listing-total")).toContainText("(newest first)");
  // The first row is the newest member of the results index, read from Redis itself.
  await expect(async () => {
    const newest = redis("ZREVRANGE", "{repoll}:results", "0", "0");
    await expect(page.getByTestId("task-row").first()).toHaveAttribute("data-id", newest, { timeout: 1000 });
  }).toPass({ timeout: 10_000 });
  // Tabs keep the order.
  await page.getByTestId("tab-dead").click();
  await expect(page).toHaveURL(/state=dead&order=newest/);
  await page.getByTestId("order-toggle").click();
  await expect(page).toHaveURL(/state=dead$/);
  expect(errors).toEqual([]);
});

test("retry a dead task and watch it complete live; search finds it; its timeline shows every step", async ({
  page,
  request,
}) => {
  test.setTimeout(120_000);
  const errors = watchErrors(page);
  const query = `admin-dead-${run}-${test.info().repeatEachIndex} fail=500 fail_times=5 polls=1`;
  const id = await submit(request, query);
  await signIn(page);

  // Search by the query text finds the task; the detail page follows it live.
  await page.goto("/admin/tasks");
  await waitLive(page);
  await page.getByTestId("search-input").fill(query);
  await page.getByTestId("search-submit").click();
  await expect(page.locator(`[data-testid=task-row][data-id="${id}"]`)).toBeVisible();
  // An id prefix finds it too.
  await page.goto(`/admin/tasks?q=${id.slice(0, 10)}`);
  await expect(page.locator(`[data-testid=task-row][data-id="${id}"]`)).toBeVisible();
  await page.locator(`[data-testid=task-row][data-id="${id}"] a`).first().click();
  await expect(page).toHaveURL(new RegExp(`/admin/tasks/${id}$`));
  await waitLive(page);

  // Five failures with backoff: dead after ~8 s, shown without a reload.
  await expect(page.getByTestId("field-state")).toHaveText("dead", { timeout: 60_000 });
  await expect(page.getByTestId("field-dead reason")).toContainText("max_attempts");
  await expect(page.getByTestId("timeline").locator("li")).not.toHaveCount(0);

  await page.getByTestId("task-retry").click();
  await expect(page.getByTestId("action-result")).toHaveText(`retried task ${id}`);
  // The sixth call succeeds: the final result appears live.
  await expect(page.getByTestId("task-result")).toBeVisible({ timeout: 20_000 });
  const timeline = page.getByTestId("timeline");
  for (const kind of ["claimed", "retried", "completed"]) {
    await expect(timeline.locator(`li[data-kind="${kind}"]`).first()).toBeVisible();
  }
  await expect(timeline).toContainText("admin");
  expect((await apiStatus(request, id)).status).toBe("done");
  await shot(page, "task-detail");

  // The audit log on the overview names the action.
  await page.goto("/admin");
  await expect(page.getByTestId("audit")).toContainText("retry");
  expect(errors).toEqual([]);
});

test("purge dead needs the typed state name", async ({ page, request }) => {
  test.setTimeout(90_000);
  const errors = watchErrors(page, [400]);
  const id = await submit(request, `admin-purge-${run} fail=500`);
  await signIn(page);
  // Five failures with backoff, then dead.
  await expect(async () => {
    expect(redis("HGET", `{repoll}:t:${id}`, "state")).toBe("dead");
  }).toPass({ timeout: 60_000 });
  await expect(async () => {
    expect(await count(page, "dead")).toBeGreaterThanOrEqual(1);
  }).toPass({ timeout: 10_000 });
  const dead = await count(page, "dead");
  await expect(page.getByTestId("purge-count-dead")).toHaveText(String(dead));

  await page.getByTestId("purge-confirm-dead").fill("deaf");
  await page.getByTestId("purge-dead").click();
  await expect(page.getByTestId("action-result")).toHaveText('not purged: type "dead" to confirm');
  expect(redis("HGET", `{repoll}:t:${id}`, "state")).toBe("dead");

  await page.getByTestId("purge-confirm-dead").fill("dead");
  await page.getByTestId("purge-dead").click();
  await expect(page.getByTestId("action-result")).toHaveText(`purged ${dead} (dead)`);
  await expect(page.getByTestId("count-dead")).toHaveText("0");
  expect(redis("EXISTS", `{repoll}:t:${id}`)).toBe("0");
  expect(errors).toEqual([]);
});

test("pause stops claims, resume restarts them", async ({ page, request }) => {
  const errors = watchErrors(page);
  await signIn(page);
  await page.getByTestId("pause").click();
  await expect(page.getByTestId("paused")).toHaveText("paused");
  try {
    const id = await submit(request, `admin-paused-${run} polls=1`);
    await page.waitForTimeout(2000);
    const view = await apiStatus(request, id);
    expect(view.status).toBe("processing");
    expect(redis("HGET", `{repoll}:t:${id}`, "state")).toBe("due");
    expect(redis("HGET", `{repoll}:t:${id}`, "token")).toBe("0"); // never claimed
    await expect(page.getByTestId("count-ready")).not.toHaveText("0");

    await page.getByTestId("resume").click();
    await expect(page.getByTestId("paused")).toHaveText("running");
    await expect(async () => {
      expect((await apiStatus(request, id)).status).toBe("done");
    }).toPass({ timeout: 15_000 });
  } finally {
    redis("DEL", "{repoll}:paused");
  }
  expect(errors).toEqual([]);
});

test("a lease held by a killed worker shows as stuck and is released", async ({ page, request }) => {
  test.setTimeout(150_000);
  const errors = watchErrors(page);
  const workerId = `e2e-doomed-${run}`;
  const worker: ChildProcess = spawn(path.join(root, "target/release/repoll"), ["worker"], {
    cwd: root,
    env: {
      ...process.env,
      REDIS_URL: redisUrl,
      REPOLL_UPSTREAM_URL: `${simUrl}/api/query?q={key}`,
      REPOLL_WORKER_ID: workerId,
      REPOLL_LEASE_MS: "60000",
      REPOLL_CONCURRENCY: "4",
      REPOLL_POLL_INTERVAL_MS: "250",
      RUST_LOG: "warn",
    },
    stdio: "ignore",
  });
  try {
    await signIn(page);
    await expect(page.locator(`[data-testid=workers] tr[data-worker="${workerId}"]`)).toBeVisible({
      timeout: 20_000,
    });
    // 20 tasks at once for 16 embedded slots + 4 doomed ones, each call taking 8 s: once all
    // are leased, the doomed worker holds some of them whoever won each race.
    const ids = await Promise.all(
      Array.from({ length: 20 }, (_, i) => submit(request, `admin-stuck-${run}-${i} latency=8000 polls=1`)),
    );
    await expect(async () => {
      for (const id of ids) expect(redis("HGET", `{repoll}:t:${id}`, "worker")).not.toBe("");
    }).toPass({ timeout: 7_000 });
    const held = ids.find((id) => redis("HGET", `{repoll}:t:${id}`, "worker") === workerId);
    expect(held, "the doomed worker took one of the tasks").toBeTruthy();
    worker.kill("SIGKILL");

    await page.goto("/admin/leases?within=120000");
    await waitLive(page);
    // Located by task and holder: once released, a live worker may hold the same task anew.
    const row = page.locator(`[data-testid=lease-row][data-id="${held}"][data-worker="${workerId}"]`);
    await expect(row).toBeVisible();
    await shot(page, "stuck-leases");
    await row.getByTestId("lease-release").click();
    await expect(page.getByTestId("action-result")).toHaveText("released 1 lease");
    await expect(row).toHaveCount(0, { timeout: 10_000 });
    // Released means due again (or already reclaimed by a live worker), never the dead one.
    expect(redis("HGET", `{repoll}:t:${held}`, "worker")).not.toBe(workerId);
    // The doomed worker's other leases go back the same way, one click each.
    const rest = page.locator(`[data-testid=lease-row][data-worker="${workerId}"]`);
    for (let n = await rest.count(); n > 0; n--) {
      await rest.first().getByTestId("lease-release").click();
      await expect(rest).toHaveCount(n - 1, { timeout: 10_000 });
    }
  } finally {
    worker.kill("SIGKILL");
  }
  // The embedded workers finish the 8 s calls (the released task included) before the next test.
  await expect(async () => {
    expect(redis("ZCARD", "{repoll}:lease")).toBe("0");
  }).toPass({ timeout: 30_000 });
  expect(errors).toEqual([]);
});
