import { test, expect, Page, BrowserContext } from "@playwright/test";
import { redis, signIn, waitLive, watchErrors } from "./support";
import { shot, redisPipe, taskId, quote, deadTaskLines, submit, background, luminance } from "./fixtures";

// Layout at any width and in either scheme: table cells wrap between words only (measured in
// the rendered text), no page scrolls sideways at 375 px, dark mode follows the system.

const run = Date.now();

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

/**
 * The action buttons of the page (inside `main`) that cannot be seen as the page is drawn,
 * nothing scrolled: outside the viewport, or clipped by a box that scrolls sideways (a wide
 * table's actions past its right edge, reachable only by a scroll nobody sees).
 */
async function unreachableActions(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const out: string[] = [];
    const vw = document.documentElement.clientWidth;
    for (const el of Array.from(document.querySelectorAll<HTMLElement>("main button, main input[type=submit]"))) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) continue; // not shown
      const name = `${el.textContent?.trim() || (el as HTMLInputElement).value} (${el.dataset.testid ?? el.tagName.toLowerCase()})`;
      if (r.left < 0 || r.right > vw + 0.5) {
        out.push(`${name}: ${Math.round(r.left)}..${Math.round(r.right)} px in a ${vw} px viewport`);
        continue;
      }
      for (let box = el.parentElement; box && box !== document.body; box = box.parentElement) {
        if (getComputedStyle(box).overflowX === "visible") continue;
        const b = box.getBoundingClientRect();
        if (r.left < b.left - 0.5 || r.right > b.right + 0.5) {
          out.push(`${name}: clipped by ${box.className || box.tagName.toLowerCase()}`);
          break;
        }
      }
    }
    return out;
  });
}

test("every admin page's action buttons are in view at 1280 and at 375 px, nothing scrolled", async ({ browser }) => {
  test.setTimeout(120_000);
  const deadQuery = `actions-dead-${run}-${"v".repeat(150)} polls=1`;
  redisPipe(deadTaskLines(deadQuery, `HTTP 503: ${"unavailable-".repeat(15)}`, Date.now()));
  for (const width of [1280, 375]) {
    const context = await browser.newContext({ viewport: { width, height: 900 } });
    const page = await context.newPage();
    const errors = watchErrors(page);
    try {
      await signIn(page);
      const pages = ["/admin", "/admin/upstreams", "/admin/tasks?state=dead", "/admin/dead", "/admin/bulk?state=dead", "/admin/leases", `/admin/tasks/${taskId(deadQuery)}`];
      for (const url of pages) {
        await page.goto(url);
        await waitLive(page);
        expect(await unreachableActions(page), `${url} at ${width} px`).toEqual([]);
      }
    } finally {
      await context.close();
    }
    expect(errors).toEqual([]);
  }
  redis("ZREM", "{repoll}:dead", taskId(deadQuery));
  redis("DEL", `{repoll}:t:${taskId(deadQuery)}`);
});
