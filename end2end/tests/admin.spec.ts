import { test, expect, Page, APIRequestContext } from "@playwright/test";
import { spawn, ChildProcess } from "child_process";
import * as fs from "fs";
import * as path from "path";
import { redis, redisUrl, signIn, spawnServe, waitLive, watchErrors } from "./support";
import { root, shot, submit } from "./fixtures";

// The admin dashboard end to end: the real server (`repoll serve --sim`, 16 embedded worker
// slots, managed Redis) in headless Chromium, signed in with the e2e admin password. Tasks are
// created through the public API with simulator overrides in their keys (`fail=500
// fail_times=5` fails five times — enough to die with the default 5 attempts — and then
// succeeds, which is what "retry a dead task and watch it complete" needs), plus a per-run
// suffix because the e2e Redis lives for the whole run.
//
// The stuck lease is made by a real `repoll worker` process killed with SIGKILL while it
// holds leases (60 s lease). The web server's embedded workers cannot race it for the tasks:
// the test submits them while the queue is paused and resumes it only once the web process is
// SIGSTOPped (see that test). Afterwards it waits until no lease is left, so the next tests
// find the embedded workers free.

const simUrl = process.env.E2E_SIM_URL!;
const run = Date.now();

async function apiStatus(request: APIRequestContext, id: string): Promise<{ status: string; polls: number }> {
  const res = await request.get(`/api/v1/queries/${id}`);
  return res.json();
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
  test.setTimeout(120_000);
  const errors = watchErrors(page);
  await signIn(page);
  await expect(page.getByTestId("counts")).toBeVisible();
  await expect(page.getByTestId("signed-in-as")).toContainText("admin");
  await expect(page.getByTestId("redis-ok")).toBeVisible();
  // Live means pushed by a change: the overview is watched on a web process of its own (same
  // Redis, same session cookie, no workers) whose quiet refresh is an hour
  // (REPOLL_ADMIN_QUIET_REFRESH_MS; the default re-reads every 5 s with or without a change).
  // The tasks are submitted to and worked by the suite's server, so the only way news reaches
  // this page is Pub/Sub to the other process, then its /admin/events stream.
  const web = await spawnServe({ REPOLL_ADMIN_QUIET_REFRESH_MS: "3600000" });
  try {
    await page.goto(`${web.url}/admin`);
    await waitLive(page);
    await expect(page.getByTestId("counts")).toBeVisible();
    const before = await count(page, "results");
    // Three tasks flow through while the page stays open (no reload, no click).
    for (let i = 0; i < 3; i++) await submit(request, `admin-flow-${run}-${i} polls=2`);
    await expect(async () => {
      expect(await count(page, "results")).toBeGreaterThanOrEqual(before + 3);
    }).toPass({ timeout: 30_000 });
    await expect(page.getByTestId("workers")).toContainText("in flight");
    await shot(page, "admin-overview", true);
    expect(errors).toEqual([]);
    // Leave before the process ends, so its stream's end is no page error.
    await page.goto("about:blank");
  } finally {
    await web.stop();
  }
});

test("results and dead tasks open newest first; the list pages oldest first too", async ({ page, request }) => {
  const errors = watchErrors(page);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push(await submit(request, `admin-order-${run}-${i} polls=1`));
  await expect(async () => {
    for (const id of ids) expect((await apiStatus(request, id)).status).toBe("done");
  }).toPass({ timeout: 20_000 });
  await signIn(page);
  await page.goto("/admin/tasks?state=results");
  await waitLive(page);
  // The latest first by default: the first row is the newest member of the results index,
  // read from Redis itself.
  await expect(page.getByTestId("listing-total")).toContainText("(newest first)");
  await expect(async () => {
    const newest = redis("ZREVRANGE", "{repoll}:results", "0", "0");
    await expect(page.getByTestId("task-row").first()).toHaveAttribute("data-id", newest, { timeout: 1000 });
  }).toPass({ timeout: 10_000 });
  await page.getByTestId("order-toggle").click();
  await expect(page).toHaveURL(/state=results&order=oldest/);
  await expect(page.getByTestId("listing-total")).toContainText("(oldest first)");
  await expect(async () => {
    const oldest = redis("ZRANGE", "{repoll}:results", "0", "0");
    await expect(page.getByTestId("task-row").first()).toHaveAttribute("data-id", oldest, { timeout: 1000 });
  }).toPass({ timeout: 10_000 });
  // Each tab opens at its own order: dead newest first, ready oldest first (neither in the URL).
  await page.getByTestId("tab-dead").click();
  await expect(page).toHaveURL(/state=dead$/);
  await page.getByTestId("tab-ready").click();
  await expect(page).toHaveURL(/state=ready$/);
  await page.getByTestId("tab-results").click();
  await expect(page).toHaveURL(/state=results$/);
  await expect(page.getByTestId("listing-total")).toContainText("(newest first)");
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
  await shot(page, "admin-task-detail", true);

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
    expect(redis("HGET", `{repoll}:t:${id}`, "s")).toBe("dead");
  }).toPass({ timeout: 60_000 });
  await expect(async () => {
    expect(await count(page, "dead")).toBeGreaterThanOrEqual(1);
  }).toPass({ timeout: 10_000 });
  const dead = await count(page, "dead");
  await expect(page.getByTestId("purge-count-dead")).toHaveText(String(dead));

  await page.getByTestId("purge-confirm-dead").fill("deaf");
  await page.getByTestId("purge-dead").click();
  await expect(page.getByTestId("action-result")).toHaveText('not purged: type "dead" to confirm');
  expect(redis("HGET", `{repoll}:t:${id}`, "s")).toBe("dead");

  await page.getByTestId("purge-confirm-dead").fill("dead");
  await page.getByTestId("purge-dead").click();
  await expect(page.getByTestId("action-result")).toHaveText(`purged ${dead} (dead)`);
  await expect(page.getByTestId("count-dead")).toHaveText("0");
  expect(redis("EXISTS", `{repoll}:t:${id}`)).toBe("0");
  expect(errors).toEqual([]);
});

/** Everything Redis runs, as `redis-cli monitor` prints it (one line per command, in the order
 * Redis executed them), collected from the moment `ready()` resolves until `stop()`. */
function monitorRedis() {
  const child = spawn("redis-cli", ["--no-auth-warning", "-u", redisUrl, "monitor"], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  const lines: string[] = [];
  let rest = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    const parts = (rest + chunk.toString()).split("\n");
    rest = parts.pop() ?? "";
    lines.push(...parts);
  });
  return {
    lines,
    /** Resolves once the monitor is attached (redis-cli prints OK first). */
    ready: () => expect.poll(() => lines[0], { timeout: 10_000 }).toBe("OK"),
    stop: () => child.kill("SIGKILL"),
  };
}

/** Claim attempts in `lines` after the first function call that names `key` (the enqueue). A
 * claim attempt is the claim path's first call, which answers nothing while paused: the Lua
 * library's `claim` function (`repoll_<hash8>_claim`, sixteen KEYS, the ready list first). If
 * the claim path's signature changes again, the caller's poll fails loudly, never passes. */
function claimAttemptsAfter(lines: string[], key: string): number {
  const from = lines.findIndex((l) => /"fcall"/i.test(l) && l.includes(`"${key}"`));
  if (from < 0) return 0;
  const claim = /"fcall" "repoll_[0-9a-f]{8}_claim" "16" "\{repoll\}:ready"/i;
  return lines.slice(from + 1).filter((l) => claim.test(l)).length;
}

test("pause stops claims, resume restarts them", async ({ page, request }) => {
  const errors = watchErrors(page);
  await signIn(page);
  const monitor = monitorRedis();
  try {
    await monitor.ready();
    await page.getByTestId("pause").click();
    await expect(page.getByTestId("paused")).toHaveText("paused");
    expect(redis("EXISTS", "{repoll}:paused")).toBe("1");
    const id = await submit(request, `admin-paused-${run} polls=1`);
    // Proof that the workers looked while paused, not just that time passed: Redis itself saw
    // three claim attempts after the task was enqueued (the workers back off, never give up,
    // while something is due). No fixed wait: the deadline is a hang guard.
    await expect
      .poll(() => claimAttemptsAfter(monitor.lines, `{repoll}:t:${id}`), { timeout: 20_000 })
      .toBeGreaterThanOrEqual(3);
    // ... and none took it: still due (its due time has passed), never leased.
    expect(redis("HGET", `{repoll}:t:${id}`, "s")).toBe("due");
    // Never leased: a record gets its token field (`tk`) with its first lease.
    expect(redis("HEXISTS", `{repoll}:t:${id}`, "tk")).toBe("0");
    // Waiting in the ready list (ready since its enqueue).
    expect(redis("LPOS", "{repoll}:ready", id)).toMatch(/^\d+$/);
    expect((await apiStatus(request, id)).status).toBe("processing");
    await expect(page.getByTestId("count-ready")).not.toHaveText("0");

    await page.getByTestId("resume").click();
    await expect(page.getByTestId("paused")).toHaveText("running");
    await expect(async () => {
      expect((await apiStatus(request, id)).status).toBe("done");
    }).toPass({ timeout: 15_000 });
  } finally {
    monitor.stop();
    redis("DEL", "{repoll}:paused");
  }
  expect(errors).toEqual([]);
});

test("the upstreams page opens and closes the circuit breaker; the overview shows it", async ({ page, request }) => {
  const errors = watchErrors(page);
  await signIn(page);
  try {
    await page.getByTestId("admin-nav").getByRole("link", { name: "Upstreams" }).click();
    const row = page.getByTestId("upstream-default");
    await expect(row.getByTestId("upstream-breaker")).toContainText("closed");
    await row.getByTestId("open-breaker").click();
    await expect(row.getByTestId("upstream-breaker")).toContainText("open");
    await expect(row.getByTestId("upstream-breaker")).toContainText("opened by hand");
    expect(redis("EXISTS", "{repoll}:breaker")).toBe("1");
    // A task submitted now waits: claims take nothing while the breaker is open.
    const id = await submit(request, `admin-breaker-${run} polls=1`);
    expect((await apiStatus(request, id)).status).toBe("processing");
    await page.getByTestId("admin-nav").getByRole("link", { name: "Overview" }).click();
    await expect(page.getByTestId("breaker-banner")).toContainText("circuit breaker open");
    // The charts mark the opening (issue 43 row 8), in words and in the marker's tooltip.
    const marks = page.getByTestId("throughput-chart").getByTestId("chart-marker");
    await expect(marks.filter({ hasText: "breaker opened" }).first()).toBeAttached();
    await page.getByTestId("admin-nav").getByRole("link", { name: "Upstreams" }).click();
    await page.getByTestId("upstream-default").getByTestId("close-breaker").click();
    await expect(page.getByTestId("upstream-default").getByTestId("upstream-breaker")).toContainText("closed");
    await expect(async () => {
      expect((await apiStatus(request, id)).status).toBe("done");
    }).toPass({ timeout: 15_000 });
  } finally {
    redis("DEL", "{repoll}:breaker");
  }
  expect(errors).toEqual([]);
});

test("the upstreams page lists a tenant's waiting queries and links to them", async ({ page, request }) => {
  const errors = watchErrors(page);
  await signIn(page);
  const tenant = `e2e-${run}`.slice(0, 64);
  // Paused, so the tenant's queries stay ready while the page is read.
  redis("SET", "{repoll}:paused", `${Date.now()}|e2e`);
  try {
    for (let i = 0; i < 3; i++) {
      const res = await request.post("/api/v1/queries", {
        data: { query: `admin-tenant-${run}-${i} polls=1`, tenant },
      });
      expect(res.status()).toBe(202);
    }
    const bad = await request.post("/api/v1/queries", { data: { query: "x", tenant: "not a tenant" } });
    expect(bad.status()).toBe(422);
    expect((await bad.json()).error.code).toBe("invalid_tenant");
    await page.getByTestId("admin-nav").getByRole("link", { name: "Upstreams" }).click();
    const entry = page.getByTestId("upstream-default").getByTestId(`tenant-${tenant}`);
    await expect(entry).toContainText("3 · 0");
    await entry.getByRole("link").click();
    await expect(page).toHaveURL(new RegExp(`q=tenant%3A${tenant}`));
    for (let i = 0; i < 3; i++) {
      await expect(page.getByText(`admin-tenant-${run}-${i} polls=1`)).toBeVisible();
    }
  } finally {
    redis("DEL", "{repoll}:paused");
  }
  expect(errors).toEqual([]);
});

/** The pid of the `repoll serve` under test: the parent of its managed redis-server (a
 * direct child, which dies with it), checked by its command line. */
function webServerPid(): number {
  const redisPid = Number(/process_id:(\d+)/.exec(redis("INFO", "server"))![1]);
  const stat = fs.readFileSync(`/proc/${redisPid}/stat`, "utf8");
  // Fields after the command name "(...)": state, ppid, ...
  const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  const cmdline = fs.readFileSync(`/proc/${ppid}/cmdline`, "utf8").split("\0");
  expect(cmdline.some((a) => a.endsWith("/repoll")) && cmdline.includes("serve"), cmdline.join(" ")).toBe(true);
  return ppid;
}

test("a lease held by a killed worker shows as stuck and is released", async ({ page, request }) => {
  test.setTimeout(150_000);
  const errors = watchErrors(page);
  const workerId = `e2e-doomed-${run}`;
  const web = webServerPid();
  const worker: ChildProcess = spawn(path.join(root, "target/release/repoll"), ["worker"], {
    cwd: root,
    env: {
      ...process.env,
      REDIS_URL: redisUrl,
      REPOLL_UPSTREAM_URL: `${simUrl}/api/query?q={key}`,
      REPOLL_WORKER_ID: workerId,
      REPOLL_LEASE_MS: "60000",
      REPOLL_CONCURRENCY: "16",
      REPOLL_POLL_INTERVAL_MS: "250",
      RUST_LOG: "warn",
    },
    stdio: "ignore",
  });
  const exited = new Promise((resolve) => worker.once("exit", resolve));
  // The doomed worker must hold the leases, and the web process's embedded workers would
  // otherwise race it for every task. So the test decides who can claim: the tasks are
  // submitted while the queue is paused, the web process (its workers, and the simulator it
  // hosts) is stopped with SIGSTOP, and only then is the queue resumed — the doomed worker is
  // the only claimer left, so it takes all four (it has 16 slots). Its calls cannot finish
  // either (the simulator is stopped too). It is killed holding them, and the web process
  // is continued.
  let stopped = false;
  try {
    await signIn(page);
    await expect(page.locator(`[data-testid=workers] tr[data-worker="${workerId}"]`)).toBeVisible({
      timeout: 20_000,
    });
    redis("SET", "{repoll}:paused", `${Date.now()}|e2e`);
    const ids = await Promise.all(
      Array.from({ length: 4 }, (_, i) => submit(request, `admin-stuck-${run}-${i} latency=2000 polls=1`)),
    );
    // No page stays connected to the process about to be stopped.
    await page.goto("about:blank");
    process.kill(web, "SIGSTOP");
    stopped = true;
    redis("DEL", "{repoll}:paused");
    // Wait (a hang guard, not a measurement) until the doomed worker holds every lease.
    await expect
      .poll(() => ids.filter((id) => redis("HGET", `{repoll}:t:${id}`, "w") === workerId).length, {
        timeout: 20_000,
      })
      .toBe(4);
    for (const id of ids) expect(redis("ZSCORE", "{repoll}:lease", id)).not.toBe("");
    worker.kill("SIGKILL");
    await exited;
    process.kill(web, "SIGCONT");
    stopped = false;

    await page.goto("/admin/leases?within=120000");
    await waitLive(page);
    // Each is shown as held by the dead worker. Located by task and holder: once released, a
    // live worker may hold the same task anew.
    const row = (id: string) => page.locator(`[data-testid=lease-row][data-id="${id}"][data-worker="${workerId}"]`);
    for (const id of ids) await expect(row(id)).toBeVisible();
    await shot(page, "admin-stuck-leases", true);
    for (const id of ids) {
      await row(id).getByTestId("lease-release").click();
      await expect(page.getByTestId("action-result")).toHaveText("released 1 lease");
      await expect(row(id)).toHaveCount(0, { timeout: 10_000 });
      // Released means due again (or already reclaimed by a live worker), never the dead one.
      expect(redis("HGET", `{repoll}:t:${id}`, "w")).not.toBe(workerId);
    }
    // Anything else the doomed worker took (a task left due by an earlier test) goes back too.
    const rest = page.locator(`[data-testid=lease-row][data-worker="${workerId}"]`);
    for (let n = await rest.count(); n > 0; n--) {
      await rest.first().getByTestId("lease-release").click();
      await expect(rest).toHaveCount(n - 1, { timeout: 10_000 });
    }
  } finally {
    if (stopped) process.kill(web, "SIGCONT");
    worker.kill("SIGKILL");
    redis("DEL", "{repoll}:paused");
  }
  // The embedded workers finish the released tasks before the next test.
  await expect(async () => {
    expect(redis("ZCARD", "{repoll}:lease")).toBe("0");
  }).toPass({ timeout: 30_000 });
  expect(errors).toEqual([]);
});
