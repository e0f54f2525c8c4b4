import { test, expect } from "@playwright/test";
import { spawn, ChildProcess } from "child_process";
import * as path from "path";
import { adminPassword, redisUrl, spawnServe, waitLive, watchErrors } from "./support";
import { shot } from "./fixtures";

// Issue 43 row 1: the only worker stopped must be said before anyone looks — on every admin
// page (the attention strip, red) and on the overview's status line — and the user waiting on
// a query must read "nothing is polling right now", not "next poll due now" for ever. A queue
// of its own on a second `repoll serve` with no workers, then a `repoll worker` started: both
// pages clear by themselves.

const root = path.resolve(__dirname, "..", "..");
const run = Date.now();

test("a queue nobody polls is said in red on every admin page and on the user's page; a worker clears both live", async ({
  page,
  browser,
  request,
}) => {
  test.setTimeout(120_000);
  const errors = watchErrors(page);
  const queue = `e2e-attention-${run}`;
  const web = await spawnServe({ REPOLL_QUEUE: queue, REPOLL_ADMIN_QUIET_REFRESH_MS: "500" });
  let worker: ChildProcess | undefined;
  try {
    await page.goto(`${web.url}/admin/login`);
    await page.getByTestId("login-password").fill(adminPassword);
    await page.getByTestId("login-submit").click();
    await expect(page).toHaveURL(/\/admin$/);
    await waitLive(page);
    const strip = page.getByTestId("attention");
    await expect(strip).toHaveClass(/\bred\b/);
    await expect(page.getByTestId("attention-no-worker")).toContainText(
      "No worker has reported in: nothing is polling the upstream.",
    );
    await expect(page.getByTestId("not-polled")).toBeVisible();
    await expect(page.getByTestId("paused")).toHaveClass(/\berr\b/);
    // Every page says it, not only the overview.
    for (const [link, url] of [
      ["Dead work", /\/admin\/dead$/],
      ["Tasks", /\/admin\/tasks$/],
      ["Upstreams", /\/admin\/upstreams$/],
    ] as const) {
      await page.getByTestId("admin-nav").getByRole("link", { name: link, exact: true }).click();
      await expect(page).toHaveURL(url);
      await expect(page.getByTestId("attention-no-worker")).toBeVisible();
    }
    // Its link leads to the Workers section.
    await page.getByTestId("attention-no-worker").getByRole("link", { name: "see the workers" }).click();
    await expect(page).toHaveURL(/\/admin#workers$/);
    await expect(page.getByTestId("workers-empty")).toBeVisible();

    const res = await request.post(`${web.url}/api/v1/queries`, { data: { query: `attention-${run} polls=1` } });
    expect([200, 202]).toContain(res.status());
    const id = (await res.json()).id;
    const user = await browser.newPage();
    const userErrors = watchErrors(user);
    await user.goto(`${web.url}/q/${id}`);
    await expect(user.getByTestId("query-status")).toHaveText("processing");
    await expect(user.getByTestId("query-unpolled")).toContainText("Nothing is polling right now.");
    await expect(user.getByTestId("query-next-poll")).toHaveText("nothing is polling right now");
    await shot(user, "query-unpolled", true);
    await page.goto(`${web.url}/admin/dead`);
    await expect(page.getByTestId("attention-no-worker")).toBeVisible();
    await shot(page, "admin-attention", true);

    worker = spawn(path.join(root, "target/release/repoll"), ["worker"], {
      cwd: root,
      env: {
        ...process.env,
        REDIS_URL: redisUrl,
        REPOLL_QUEUE: queue,
        REPOLL_UPSTREAM_URL: `${process.env.E2E_SIM_URL}/api/query?q={key}`,
        REPOLL_WORKER_ID: `e2e-attention-${run}`,
        REPOLL_HEARTBEAT_MS: "300",
        REPOLL_POLL_INTERVAL_MS: "250",
        RUST_LOG: "warn",
      },
      stdio: "ignore",
    });
    // Neither page is reloaded: the strip re-reads on the live stream, the query page on its own.
    await expect(page.getByTestId("attention-no-worker")).toHaveCount(0, { timeout: 30_000 });
    await expect(strip).toBeHidden();
    await expect(page.getByTestId("not-polled")).toHaveCount(0);
    await expect(user.getByTestId("query-status")).toHaveText("done", { timeout: 30_000 });
    await expect(user.getByTestId("query-unpolled")).toHaveCount(0);
    expect(errors).toEqual([]);
    expect(userErrors).toEqual([]);
    await user.close();
    await page.goto("about:blank");
  } finally {
    worker?.kill("SIGTERM");
    await web.stop();
  }
});
