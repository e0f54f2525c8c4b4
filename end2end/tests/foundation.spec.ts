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

test("the public page is rendered on the server, hydrates under its CSP, and shows no Redis internals", async ({ page }) => {
  const errors = watchErrors(page);
  const res = await page.goto("/");
  // Every HTML response carries a nonce-based policy; hydration working below proves the
  // page's own scripts carry that nonce.
  const csp = res?.headers()["content-security-policy"] ?? "";
  expect(csp).toMatch(/script-src 'self' 'nonce-[0-9a-f]{32}'/);
  expect(csp).toContain("frame-ancestors 'none'");
  expect(res?.headers()["x-content-type-options"]).toBe("nosniff");
  await expect(page.getByTestId("query-input")).toBeVisible();
  await expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true", { timeout: 15_000 });
  // Redis version, key count and queue name are for signed-in operators only.
  await expect(page.getByTestId("redis-status")).toHaveCount(0);
  expect(errors).toEqual([]);
});

test("navigation between pages works without a reload", async ({ page }) => {
  const errors = watchErrors(page);
  await page.goto("/");
  await expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true", { timeout: 15_000 });
  await page.getByRole("link", { name: "Dashboard" }).click();
  // An anonymous visitor lands on the sign-in form.
  await expect(page).toHaveURL(/\/admin(\/login)?$/);
  await expect(page.getByTestId("login-password")).toBeVisible();
  expect(errors).toEqual([]);
});

test("an unknown path is a 404 page", async ({ page }) => {
  const res = await page.goto("/no/such/page");
  expect(res?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});
