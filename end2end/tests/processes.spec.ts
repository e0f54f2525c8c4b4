import { test, expect, Browser, Page } from "@playwright/test";
import { spawn, ChildProcess } from "child_process";
import * as path from "path";
import { adminPassword, redisUrl, signIn, watchErrors } from "./support";

// The overview's Workers table as Sidekiq's Busy page: each worker process's memory, and an
// admin's quiet and stop, which reach the process through Redis (its registry entry, read on
// its heartbeat). Each test starts a `repoll worker` of its own on the suite's Redis (the web
// server's embedded workers are left alone: later specs need them), with fast heartbeats.

const root = path.resolve(__dirname, "..", "..");
const simUrl = process.env.E2E_SIM_URL!;
const run = Date.now();

interface Worker {
  id: string;
  exited: Promise<number | null>;
  child: ChildProcess;
}

function startWorker(id: string): Worker {
  const child = spawn(path.join(root, "target/release/repoll"), ["worker"], {
    cwd: root,
    env: {
      ...process.env,
      REDIS_URL: redisUrl,
      REPOLL_UPSTREAM_URL: `${simUrl}/api/query?q={key}`,
      REPOLL_WORKER_ID: id,
      REPOLL_HEARTBEAT_MS: "300",
      REPOLL_CONCURRENCY: "2",
      REPOLL_GRACE_MS: "1000",
      RUST_LOG: "warn",
    },
    stdio: "ignore",
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { id, exited, child };
}

function row(page: Page, id: string) {
  return page.locator(`[data-testid=workers] tr[data-worker="${id}"]`);
}

/** The row shows the worker's memory: a positive number of bytes, in words. */
async function expectMemory(page: Page, id: string) {
  const memory = row(page, id).getByTestId("worker-memory");
  await expect(memory).toHaveText(/^\d+(\.\d)? (KiB|MiB|GiB)$/);
  expect(Number(await memory.getAttribute("data-bytes"))).toBeGreaterThan(0);
}

test("the Workers table shows memory; quiet a worker, then stop it", async ({ page }) => {
  const errors = watchErrors(page);
  const w = startWorker(`e2e-proc-${run}`);
  try {
    await signIn(page);
    await expect(row(page, w.id)).toBeVisible({ timeout: 20_000 });
    await expectMemory(page, w.id);
    await expect(row(page, w.id).getByTestId("worker-state")).toHaveText("running");

    await row(page, w.id).getByTestId("worker-quiet").click();
    await expect(page.getByTestId("action-result")).toContainText(`worker ${w.id} told to go quiet`);
    // Acted on at its next heartbeat; the live stream brings the change.
    await expect(row(page, w.id).getByTestId("worker-state")).toHaveText("quiet", { timeout: 15_000 });
    await expect(row(page, w.id).getByTestId("worker-quiet")).toHaveCount(0);

    // On a phone the question is a sheet across the screen, not a 190 px cell (issue 43 row 13).
    await page.setViewportSize({ width: 375, height: 800 });
    await row(page, w.id).getByTestId("worker-stop").click();
    const sheet = (await row(page, w.id).getByTestId("worker-stop-confirm").boundingBox())!;
    expect(sheet.width).toBeGreaterThanOrEqual(340);
    expect(sheet.x).toBeGreaterThanOrEqual(0);
    expect(sheet.x + sheet.width).toBeLessThanOrEqual(375);
    expect(sheet.y + sheet.height).toBeLessThanOrEqual(800);
    await expect(row(page, w.id).getByTestId("worker-stop-yes")).toBeInViewport();
    await row(page, w.id).getByTestId("worker-stop-cancel").click();
    await expect(row(page, w.id).getByTestId("worker-stop-confirm")).toHaveCount(0);
    await page.setViewportSize({ width: 1280, height: 720 });

    // Stop asks first; cancel leaves it running.
    await row(page, w.id).getByTestId("worker-stop").click();
    await expect(row(page, w.id).getByTestId("worker-stop-question")).toContainText(`Stop worker ${w.id}?`);
    await row(page, w.id).getByTestId("worker-stop-cancel").click();
    await expect(row(page, w.id).getByTestId("worker-stop-confirm")).toHaveCount(0);
    await row(page, w.id).getByTestId("worker-stop").click();
    await row(page, w.id).getByTestId("worker-stop-yes").click();
    await expect(page.getByTestId("action-result")).toContainText(`worker ${w.id} told to stop`);
    // It leaves the table, and its process exits 0.
    await expect(row(page, w.id)).toHaveCount(0, { timeout: 20_000 });
    expect(await w.exited).toBe(0);
    // Audited: who, what, which worker.
    const audit = page.getByTestId("audit");
    for (const action of ["quiet_worker", "stop_worker"]) {
      await expect(audit.locator("tr", { hasText: action }).filter({ hasText: `worker:${w.id}` })).toHaveCount(1);
    }
  } finally {
    w.child.kill("SIGKILL");
  }
  expect(errors).toEqual([]);
});

test("without JavaScript a worker is quieted and stopped, the stop confirmed", async ({
  browser,
}: {
  browser: Browser;
}) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const w = startWorker(`e2e-proc-nojs-${run}`);
  try {
    await page.goto("/admin/login");
    await page.getByTestId("login-password").fill(adminPassword);
    await page.getByTestId("login-submit").click();
    await expect(async () => {
      await page.goto("/admin");
      await expect(row(page, w.id)).toBeVisible({ timeout: 1_000 });
    }).toPass({ timeout: 20_000 });
    await expectMemory(page, w.id);

    await row(page, w.id).getByTestId("worker-quiet").click();
    await expect(page.getByTestId("action-result")).toContainText(`worker ${w.id} told to go quiet`);
    await expect(async () => {
      await page.goto("/admin");
      await expect(row(page, w.id).getByTestId("worker-state")).toHaveText("quiet", { timeout: 1_000 });
    }).toPass({ timeout: 15_000 });

    // The button loads the question; only its form stops the worker.
    await row(page, w.id).getByTestId("worker-stop").click();
    await expect(page).toHaveURL(/stop_worker=/);
    await expect(row(page, w.id).getByTestId("worker-stop-question")).toContainText(`Stop worker ${w.id}?`);
    await row(page, w.id).getByTestId("worker-stop-yes").click();
    await expect(page.getByTestId("action-result")).toContainText(`worker ${w.id} told to stop`);
    expect(await w.exited).toBe(0);
    await page.goto("/admin");
    await expect(page.getByTestId("counts")).toBeVisible();
    await expect(row(page, w.id)).toHaveCount(0);
  } finally {
    w.child.kill("SIGKILL");
    await context.close();
  }
});
