// Helpers shared by the specs: the suite's own Redis (through redis-cli), and signing in to
// the dashboard. The web server, its Redis and the simulator are started by
// playwright.config.ts on fixed ports; E2E_REDIS_URL names that Redis.
import { expect, Page } from "@playwright/test";
import { execFileSync } from "child_process";

export const redisUrl = process.env.E2E_REDIS_URL!;
export const adminPassword = "e2e-admin-password";

/** One redis-cli command against the suite's Redis; its output, trimmed. */
export function redis(...args: string[]): string {
  return execFileSync("redis-cli", ["--no-auth-warning", "-u", redisUrl, ...args]).toString().trim();
}

/** Waits for the live stream: proves the page hydrated and /admin/events is open. */
export async function waitLive(page: Page) {
  await expect(page.getByTestId("live-indicator")).toHaveText("live", { timeout: 15_000 });
}

/** Signs in as the admin and waits for the overview's live stream. */
export async function signIn(page: Page) {
  await page.goto("/admin/login");
  await page.getByTestId("login-password").fill(adminPassword);
  await page.getByTestId("login-submit").click();
  await expect(page).toHaveURL(/\/admin$/);
  await waitLive(page);
}

/** Page errors, console errors and failed requests; `expected` lists statuses a test provokes
 * on purpose (e.g. 400 for a purge without the typed confirmation). */
export function watchErrors(page: Page, expected: number[] = []): string[] {
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
