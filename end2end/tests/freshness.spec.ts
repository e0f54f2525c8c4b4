import { test, expect, Page, Browser } from "@playwright/test";
import { spawnServe, Served, watchErrors } from "./support";

// A stale result on the query page: shown at once with its age while its refresh runs, then
// replaced live by the refreshed result (issue 26).
//
// The windows: a second `repoll serve` of this spec's own (support.ts `spawnServe`) keeps
// results fresh for 2 s only; it shares the suite's Redis, and the suite's server (default
// windows, untouched) does the polling. Only what this server answers goes stale that soon:
// its enqueue and its reads use its own windows, while every other spec asks the suite's
// server, whose fresh window stays the default, so no other spec ever meets a stale result.
// Setting REPOLL_FRESH_FOR_MS in playwright.config.ts instead would make every query of the
// suite go stale after 2 s (a spec that re-reads a result later would see it refreshed).
//
// Every upstream answer takes 4 s (the simulator's `latency=`), so the refresh's answer is at
// least 4 s after the second ask: the stale state is there to be seen, and the swap to the
// fresh one has to come over the live stream.

const run = Date.now();
const FRESH_MS = 2000;
const shot = (name: string) => `test-results/screenshots/freshness-${name}.png`;

/** Waits until the API of `web` answers the result of `id` as stale (its fresh window has
 * passed; a read starts no refresh). */
async function untilStale(web: Served, id: string) {
  await expect
    .poll(
      async () => {
        const res = await fetch(`${web.url}/api/v1/queries/${id}`);
        return (await res.json()).freshness;
      },
      { timeout: 30_000 },
    )
    .toBe("stale");
}

/** Opens `/` on `base`, waits for hydration and asks `key`; the query's id. */
async function ask(page: Page, base: string, key: string): Promise<string> {
  await page.goto(`${base}/`);
  await expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true", { timeout: 15_000 });
  await page.getByTestId("query-input").fill(key);
  await page.bringToFront();
  await page.getByTestId("query-submit").click();
  await expect(page).toHaveURL(/\/q\/[0-9a-f]{32}$/);
  return page.url().split("/q/")[1];
}

test("a stale result shows at once with its age while it is refreshed, then the fresh one replaces it live", async ({
  page,
}) => {
  test.setTimeout(120_000);
  const web = await spawnServe({ REPOLL_FRESH_FOR_MS: String(FRESH_MS) });
  try {
    const errors = watchErrors(page);
    const key = `stale-${run} polls=1 latency=4000`;
    const id = await ask(page, web.url, key);
    const status = page.getByTestId("query-status");
    const line = page.getByTestId("query-freshness");
    await expect(status).toHaveText("done", { timeout: 30_000 });
    await expect(line).toHaveAttribute("data-freshness", "fresh");
    await expect(line).toHaveText(/^as of (just now|\d+ s ago)$/);

    await untilStale(web, id);
    // Asked again: the stored result at once, marked stale and being refreshed.
    expect(await ask(page, web.url, key)).toBe(id);
    await expect(line).toHaveAttribute("data-freshness", "refreshing");
    await expect(line).toHaveAttribute("role", "status");
    await expect(line).toHaveText(/^as of \d+ s ago · refreshing…$/);
    await expect(status).toHaveText("done");
    await expect(page.getByTestId("query-data")).toBeVisible();
    // The age ticks while the page waits.
    const age = async () => Number(/as of (\d+) s ago/.exec((await line.textContent()) ?? "")?.[1]);
    const before = await age();
    await expect.poll(age, { timeout: 5_000 }).toBeGreaterThan(before);
    await page.screenshot({ path: shot("refreshing"), fullPage: true });
    // A marker that only survives if the page is never reloaded.
    await page.evaluate(() => ((window as any).__noReload = 1));

    // The refreshed result arrives over the live stream.
    await expect(line).toHaveAttribute("data-freshness", "fresh", { timeout: 30_000 });
    await expect(line).toHaveText(/^as of (just now|\d s ago)$/);
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(1);
    await page.screenshot({ path: shot("refreshed"), fullPage: true });

    // One chain for the first ask and one for the refresh: each answered done at once.
    const sim = await (await fetch(`${process.env.E2E_SIM_URL}/_sim/stats`)).json();
    expect(sim.keys[key]).toEqual({ calls: 2, done: 2 });
    expect(errors).toEqual([]);
  } finally {
    await web.stop();
  }
});

test("without JavaScript a stale result says it is refreshed, and the page refreshes itself to the new one", async ({
  browser,
}: {
  browser: Browser;
}) => {
  test.setTimeout(120_000);
  // Fresh for 6 s here: the page reloads itself every 3 s, so the refreshed result is at most
  // 3 s old when it is first seen, and still fresh (with 2 s it could already be stale again).
  const web = await spawnServe({ REPOLL_FRESH_FOR_MS: "6000" });
  const context = await browser.newContext({ javaScriptEnabled: false });
  try {
    const page = await context.newPage();
    const key = `stale-nojs-${run} polls=1 latency=4000`;
    const askPlain = async () => {
      await page.goto(`${web.url}/`);
      await page.getByTestId("query-input").fill(key);
      await page.getByTestId("query-submit").click();
      await expect(page).toHaveURL(/\/q\/[0-9a-f]{32}$/);
      return page.url().split("/q/")[1];
    };
    const id = await askPlain();
    const line = page.getByTestId("query-freshness");
    await expect(page.getByTestId("query-status")).toHaveText("done", { timeout: 30_000 });
    await untilStale(web, id);
    await askPlain();
    await expect(line).toHaveText(/^as of \d+ s ago · refreshing…$/);
    expect(await page.content()).toContain('http-equiv="refresh"');
    await page.screenshot({ path: shot("nojs-refreshing"), fullPage: true });
    // The page's own refresh brings the new result, and then stops.
    await expect(line).toHaveAttribute("data-freshness", "fresh", { timeout: 30_000 });
    expect(await page.content()).not.toContain('http-equiv="refresh"');
  } finally {
    await context.close();
    await web.stop();
  }
});
