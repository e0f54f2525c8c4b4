import { test, expect, Page } from "@playwright/test";

// Collects browser errors so a broken hydration (which shows as a console error and dead
// buttons, not as a failed page load) fails the test.
function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  return errors;
}

test("health endpoints answer", async ({ request }) => {
  const health = await request.get("/healthz");
  expect(health.status()).toBe(200);
  const ready = await request.get("/readyz");
  expect(ready.status()).toBe(200);
});

test("the page is rendered on the server, hydrates, and its button calls Redis", async ({ page }) => {
  const errors = watchErrors(page);
  await page.goto("/");
  // Server-rendered content is there before any script runs.
  await expect(page.getByTestId("redis-ok")).toContainText(/Redis: connected, version \d+\.\d+/);
  const firstCheck = await page.getByTestId("redis-checked").textContent();

  // Only a hydrated page reacts to clicks: the counter moves and the server function runs again.
  await expect(async () => {
    await page.getByTestId("redis-refresh").click();
    await expect(page.getByTestId("redis-refreshes")).not.toHaveText("0 refreshes", { timeout: 500 });
  }).toPass({ timeout: 15_000 });
  await expect(page.getByTestId("redis-checked")).not.toHaveText(firstCheck ?? "", { timeout: 10_000 });
  await expect(page.getByTestId("redis-ok")).toBeVisible();
  expect(errors).toEqual([]);
});

test("navigation between pages works without a reload", async ({ page }) => {
  const errors = watchErrors(page);
  await page.goto("/");
  await expect(page.getByTestId("redis-ok")).toBeVisible();
  await page.getByRole("link", { name: "Dashboard" }).click();
  await expect(page).toHaveURL(/\/admin$/);
  expect(errors).toEqual([]);
});

test("an unknown path is a 404 page", async ({ page }) => {
  const res = await page.goto("/no/such/page");
  expect(res?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});
