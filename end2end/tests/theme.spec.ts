import { test, expect, Page } from "@playwright/test";
import { signIn, watchErrors } from "./support";
import { background, luminance } from "./fixtures";

// The theme toggle (system / light / dark) in the top bar of every page: the choice wins over
// the system's scheme, is remembered in a cookie the server reads (the first paint of the next
// page is already right), and works without JavaScript (a form post that comes back).

async function isDark(page: Page): Promise<boolean> {
  const bg = await background(page);
  const l = luminance(bg);
  expect(l < 0.1 || l > 0.6, `background ${bg} is clearly light or dark`).toBe(true);
  return l < 0.1;
}

/** The `data-theme` of `<html>` in the server's HTML of `path` (before any script ran). */
async function servedTheme(page: Page, path: string): Promise<string | undefined> {
  const html = await (await page.request.get(path)).text();
  return /<html[^>]*data-theme="([a-z]+)"/.exec(html)?.[1];
}

test("choosing dark while the system is light turns the page dark at once, and it stays over a reload", async ({
  browser,
}) => {
  const context = await browser.newContext({ colorScheme: "light" });
  const page = await context.newPage();
  const errors = watchErrors(page);
  await page.goto("/");
  await expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true", { timeout: 15_000 });
  expect(await isDark(page)).toBe(false);
  await expect(page.getByTestId("theme-system")).toHaveAttribute("aria-pressed", "true");

  // With JavaScript: no navigation, the page changes in place.
  await page.evaluate(() => ((window as any).__samePage = true));
  await page.getByTestId("theme-dark").click();
  await expect(page.locator("html")).toHaveAttribute("data-theme", "dark");
  expect(await isDark(page)).toBe(true);
  await expect(page.getByTestId("theme-dark")).toHaveAttribute("aria-pressed", "true");
  await expect(page.getByTestId("theme-system")).toHaveAttribute("aria-pressed", "false");
  expect(await page.evaluate(() => (window as any).__samePage)).toBe(true);

  // Remembered: the server's HTML of the next page already says dark (no flash of light).
  expect(await servedTheme(page, "/")).toBe("dark");
  await page.reload();
  expect(await isDark(page)).toBe(true);
  await expect(page.getByTestId("theme-dark")).toHaveAttribute("aria-pressed", "true");
  // And on the dashboard too (the toggle is in the top bar of every page).
  await signIn(page);
  expect(await isDark(page)).toBe(true);
  await expect(page.getByTestId("theme-dark")).toHaveAttribute("aria-pressed", "true");

  // "System" follows the system's scheme again, both ways.
  await page.getByTestId("theme-system").click();
  await expect(page.locator("html")).toHaveAttribute("data-theme", "system");
  expect(await isDark(page)).toBe(false);
  await page.emulateMedia({ colorScheme: "dark" });
  expect(await isDark(page)).toBe(true);
  await page.emulateMedia({ colorScheme: "light" });
  expect(await isDark(page)).toBe(false);
  // Light stays light under a dark system.
  await page.getByTestId("theme-light").click();
  await page.emulateMedia({ colorScheme: "dark" });
  expect(await isDark(page)).toBe(false);
  expect(await servedTheme(page, "/admin")).toBe("light");
  expect(errors).toEqual([]);
  await context.close();
});

test("without JavaScript the toggle posts, and the page comes back in the chosen theme", async ({ browser }) => {
  const context = await browser.newContext({ colorScheme: "light", javaScriptEnabled: false });
  const page = await context.newPage();
  await page.goto("/no-such-page?from=theme");
  expect(await isDark(page)).toBe(false);
  const [posted] = await Promise.all([
    page.waitForResponse((r) => new URL(r.url()).pathname === "/theme"),
    page.getByTestId("theme-dark").click(),
  ]);
  expect(posted.status()).toBe(303);
  await page.waitForLoadState();
  expect(new URL(page.url()).pathname + new URL(page.url()).search).toBe("/no-such-page?from=theme");
  await expect(page.locator("html")).toHaveAttribute("data-theme", "dark");
  expect(await isDark(page)).toBe(true);
  await expect(page.getByTestId("theme-dark")).toHaveAttribute("aria-pressed", "true");
  const cookies = await context.cookies();
  expect(cookies.find((c) => c.name === "repoll_theme")?.value).toBe("dark");
  await context.close();
});
