import { test, expect, APIRequestContext } from "@playwright/test";
import { signIn, waitLive, watchErrors } from "./support";

// A task's page tells its story at the default history level (issue 29, row 3), in Chromium
// against the release build (`repoll serve --sim`, REPOLL_POLL_INTERVAL_MS=250): the claims,
// the polls summed up, its query, upstream and tenant once it is done, a time to result
// counted from the enqueue (never less than the simulator saw it take), and a failed call's
// HTTP status, duration and body as fields of their own.

const run = Date.now();
const simUrl = process.env.E2E_SIM_URL!;

async function submit(request: APIRequestContext, query: string, tenant?: string): Promise<string> {
  const res = await request.post("/api/v1/queries", { data: { query, ...(tenant ? { tenant } : {}) } });
  expect([200, 202]).toContain(res.status());
  return (await res.json()).id;
}

/** A duration as the dashboard writes it ("850 ms", "1.2 s", "3 min 5 s") in ms. */
function durationMs(words: string): number {
  if (words.startsWith("under 1 ms")) return 0;
  let ms = 0;
  for (const [, n, unit] of words.matchAll(/([\d.]+) (ms|s|min|h)\b/g)) {
    ms += Number(n) * { ms: 1, s: 1000, min: 60_000, h: 3_600_000 }[unit as "ms" | "s" | "min" | "h"];
  }
  return ms;
}

test("a polled task's page tells its claims, polls, who asked and its time to result", async ({ page, request }) => {
  const errors = watchErrors(page);
  // Five calls: four "processing" answers, the fifth done.
  const query = `history-polled-${run} polls=5`;
  const id = await submit(request, query, "acme");
  await expect
    .poll(async () => (await (await request.get(`/api/v1/queries/${id}`)).json()).status, { timeout: 20_000 })
    .toBe("done");
  const calls: number[] = (await (await request.get(`${simUrl}/_sim/key?q=${encodeURIComponent(query)}`)).json())
    .call_ms;
  expect(calls.length).toBe(5);
  const simSpan = calls[calls.length - 1] - calls[0];

  await signIn(page);
  await page.goto(`/admin/tasks/${id}`);
  await waitLive(page);
  const fields = page.getByTestId("result-fields");
  await expect(fields.getByTestId("field-query")).toContainText(`history-polled-${run}`);
  await expect(fields.getByTestId("field-upstream")).not.toHaveText("—");
  await expect(fields.getByTestId("field-tenant")).toHaveText("acme");
  await expect(fields.getByTestId("field-polls")).toContainText(/^4 polls, every ~[\d.]+ (ms|s), first .+, last .+$/);
  await expect(fields.getByTestId("field-completed by")).toContainText(/ token \d+$/);
  const ttr = (await fields.getByTestId("field-time to result").innerText()).replace(" from the enqueue", "");
  // The page rounds to a tenth of a second above 1 s: allow that much below the span.
  expect(durationMs(ttr)).toBeGreaterThanOrEqual(simSpan - 100);
  expect(durationMs(ttr)).toBeGreaterThan(0);

  const timeline = page.getByTestId("timeline");
  await expect(timeline.locator("li[data-kind=claimed]").first()).toContainText(/by \S+ token \d+/);
  await expect(timeline.locator("li[data-kind=polled]")).toHaveCount(1);
  await expect(timeline.locator("li[data-kind=polled]")).toContainText("4 polls, every ~");
  await expect(timeline.locator("li[data-kind=completed]")).toContainText("after the enqueue");
  await expect(timeline.locator("li[data-kind=completed]")).not.toContainText("result under 1 ms");
  await expect(timeline.locator("li[data-kind=enqueued]")).toHaveCount(1);
  expect(errors).toEqual([]);
});

test("a failed call's HTTP status, duration and body are fields of their own", async ({ page, request }) => {
  const errors = watchErrors(page);
  const query = `history-failing-${run} fail=503 polls=1`;
  const id = await submit(request, query);
  await signIn(page);
  await page.goto(`/admin/tasks/${id}`);
  await waitLive(page);
  const fields = page.getByTestId("task-fields");
  // The live page follows the task: its first error comes within a few polls.
  await expect(fields.getByTestId("field-HTTP status")).toHaveText("503", { timeout: 20_000 });
  await expect(fields.getByTestId("field-call took")).toHaveText(/^(under 1 ms|\d+ ms|[\d.]+ s)$/);
  await expect(fields.getByTestId("field-response body")).toHaveText('{"error":"simulated outage"}');
  await expect(fields.getByTestId("field-last error")).toContainText("HTTP 503");
  // The next try, in plain words relative to the error (never a countdown).
  await expect(page.getByTestId("attempt-then").first()).toHaveText(/^next try due .+ later$/);
  await expect(page.getByTestId("task-partial")).toHaveText("No partial data yet.");
  expect(errors).toEqual([]);
});
