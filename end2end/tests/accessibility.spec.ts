import { test, expect, Browser, BrowserContext, Page, APIRequestContext } from "@playwright/test";
import AxeBuilder from "@axe-core/playwright";
import { adminPassword, redis, waitLive } from "./support";
import { deadTask } from "./fixtures";

// Accessibility as a gate (issue 29): axe-core runs on every page of the app, in the light
// and the dark scheme, at desktop width and on a 375 px phone, and no serious or critical
// violation may be left. On the phone every link, button and form control must also be a
// tap target of at least 44 × 44 CSS px.
//
// A new page is one line in PAGES below (its path, whether it needs a session, and what
// shows that it is ready); every check then runs over it.

const run = Date.now();

/** What the pages are shown with: a finished query, one still running, a dead task. */
interface Fixture {
  done: string;
  running: string;
  dead: string;
}

interface PageCase {
  name: string;
  path: (f: Fixture) => string;
  /** Signed in as the admin (the dashboard) or a visitor without a session. */
  admin: boolean;
  /** Resolves once the page shows what it is for (hydrated, data read). */
  ready: (page: Page) => Promise<void>;
}

const hydratedForm = async (page: Page) =>
  expect(page.getByTestId("query-panel")).toHaveAttribute("data-hydrated", "true", { timeout: 15_000 });
const status = (text: string) => async (page: Page) =>
  expect(page.getByTestId("query-status")).toHaveText(text, { timeout: 15_000 });
const heading = (text: string) => async (page: Page) =>
  expect(page.getByRole("heading", { level: 1, name: text })).toBeVisible();
const live = async (page: Page) => waitLive(page);
const suggestionsOpen = async (page: Page) => {
  await waitLive(page);
  await page.getByTestId("search-input").pressSequentially("sta", { delay: 30 });
  await expect(page.getByTestId("search-suggestions")).toBeVisible();
  await page.keyboard.press("ArrowDown");
  await expect(page.getByTestId("search-input")).toHaveAttribute("aria-activedescendant", /task-search-options-0/);
};

/** Every page of the app (app/src/lib.rs's routes; the admin task lists once per state tab). */
const PAGES: PageCase[] = [
  { name: "query form", path: () => "/", admin: false, ready: hydratedForm },
  { name: "query running", path: (f) => `/q/${f.running}`, admin: false, ready: status("processing") },
  { name: "query done", path: (f) => `/q/${f.done}`, admin: false, ready: status("done") },
  { name: "not found", path: () => "/no-such-page", admin: false, ready: heading("Not found") },
  { name: "sign in", path: () => "/admin/login", admin: false, ready: heading("Sign in to the dashboard") },
  { name: "overview", path: () => "/admin", admin: true, ready: live },
  { name: "tasks ready", path: () => "/admin/tasks?state=ready", admin: true, ready: live },
  { name: "tasks waiting", path: () => "/admin/tasks?state=waiting", admin: true, ready: live },
  { name: "tasks leased", path: () => "/admin/tasks?state=leased", admin: true, ready: live },
  { name: "tasks dead", path: () => "/admin/tasks?state=dead", admin: true, ready: live },
  { name: "tasks results", path: () => "/admin/tasks?state=results", admin: true, ready: live },
  { name: "tasks search", path: () => `/admin/tasks?q=${encodeURIComponent(`a11y-${run}`)}`, admin: true, ready: live },
  // The search box's combobox with its suggestions open (typed, so the popup is checked too).
  { name: "tasks search suggestions", path: () => "/admin/tasks", admin: true, ready: suggestionsOpen },
  { name: "task done", path: (f) => `/admin/tasks/${f.done}`, admin: true, ready: live },
  { name: "task running", path: (f) => `/admin/tasks/${f.running}`, admin: true, ready: live },
  { name: "task dead", path: (f) => `/admin/tasks/${f.dead}`, admin: true, ready: live },
  { name: "dead work", path: () => "/admin/dead", admin: true, ready: live },
  { name: "bulk", path: () => "/admin/bulk?state=dead", admin: true, ready: live },
  { name: "upstreams", path: () => "/admin/upstreams", admin: true, ready: live },
  { name: "leases", path: () => "/admin/leases", admin: true, ready: live },
];

const SCHEMES = ["light", "dark"] as const;
const WIDTHS = [
  { name: "desktop", width: 1280, height: 800 },
  { name: "phone", width: 375, height: 740 },
];
/** WCAG 2.5.5 (target size, enhanced): 44 × 44 CSS px. */
const MIN_TARGET = 44;

let fixture: Fixture;
let adminState: Awaited<ReturnType<BrowserContext["storageState"]>>;

async function submit(request: APIRequestContext, query: string): Promise<string> {
  const res = await request.post("/api/v1/queries", { data: { query } });
  expect([200, 202]).toContain(res.status());
  return (await res.json()).id;
}

test.beforeAll(async ({ browser, request }) => {
  const api = async (id: string) => (await request.get(`/api/v1/queries/${id}`)).json();
  const done = await submit(request, `a11y-${run}-done polls=1`);
  await expect.poll(async () => (await api(done)).status, { timeout: 30_000 }).toBe("done");
  // A query that stays running, with partial data, for as long as the suite needs: once its
  // first poll is in, its next one is moved an hour ahead in the schedule (again until it
  // holds: a worker holding the task at that moment reschedules it). Cancelled in afterAll.
  const running = await submit(request, `a11y-${run}-running polls=150`);
  await expect.poll(async () => (await api(running)).polls, { timeout: 30_000 }).toBeGreaterThanOrEqual(1);
  await expect
    .poll(
      async () => {
        redis("ZADD", "{repoll}:due", "XX", String(Date.now() + 3_600_000), running);
        await new Promise((r) => setTimeout(r, 1_000));
        return Number(redis("ZSCORE", "{repoll}:due", running)) - Date.now();
      },
      { timeout: 30_000 },
    )
    .toBeGreaterThan(1_800_000);
  expect((await api(running)).status).toBe("processing");
  const dead = deadTask(`a11y-${run}-dead polls=1`, `HTTP 503 from the upstream (a11y ${run})`);
  fixture = { done, running, dead };
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto("/admin/login");
  await page.getByTestId("login-password").fill(adminPassword);
  await page.getByTestId("login-submit").click();
  await waitLive(page);
  adminState = await context.storageState();
  await context.close();
});

test.afterAll(async ({ browser }) => {
  if (!fixture) return; // beforeAll failed before making any
  // The other specs find the queue as they would without this one: no dead task of ours,
  // nothing of ours running.
  redis("ZREM", "{repoll}:dead", fixture.dead);
  redis("DEL", `{repoll}:t:${fixture.dead}`);
  const context = await browser.newContext({ storageState: adminState });
  const page = await context.newPage();
  await page.goto(`/admin/tasks/${fixture.running}`);
  await waitLive(page);
  await page.getByTestId("task-cancel").click();
  await expect(page.getByTestId("action-result")).toContainText("cancelled");
  await context.close();
});

async function open(browser: Browser, p: PageCase, scheme: string, size: { width: number; height: number }) {
  const context = await browser.newContext({
    viewport: size,
    colorScheme: scheme as "light" | "dark",
    storageState: p.admin ? adminState : undefined,
  });
  const page = await context.newPage();
  await page.goto(p.path(fixture));
  await p.ready(page);
  return { context, page };
}

/** The serious and critical axe violations of the page as it is now, one line each. */
async function axeViolations(page: Page): Promise<string[]> {
  const result = await new AxeBuilder({ page }).analyze();
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .flatMap((v) =>
      v.nodes.map((n) => `${v.id} (${v.impact}): ${n.target.join(" ")} — ${n.failureSummary?.split("\n").slice(1).join(" ").trim()}`),
    );
}

/** Links, buttons and form controls smaller than MIN_TARGET in either direction.
 *
 * Exempt, as WCAG 2.5.8 allows: a link inline in running text (its line height is the text's;
 * padding it to 44 px would tear the sentence apart). A control inside a <label> is measured
 * with the label, which a finger may hit as well. Controls not rendered (display: none, the
 * visually hidden .sr-only ones) are no targets. */
async function smallTargets(page: Page): Promise<string[]> {
  return page.evaluate((min) => {
    const selector = "a[href], button, input:not([type=hidden]), select, textarea, summary, [role=button]";
    const small: string[] = [];
    const blockOf = (el: Element): Element => {
      let e: Element | null = el.parentElement;
      while (e && getComputedStyle(e).display.startsWith("inline")) e = e.parentElement;
      return e ?? document.body;
    };
    const text = (el: Element) => ((el as HTMLElement).innerText ?? "").replace(/\s+/g, " ").trim();
    for (const el of Array.from(document.querySelectorAll(selector))) {
      if (!el.checkVisibility({ visibilityProperty: true })) continue;
      if (el.closest(".sr-only")) continue;
      const inline = getComputedStyle(el).display === "inline";
      if (el.tagName === "A" && inline && text(blockOf(el)).length > text(el).length) continue;
      // The control's box, grown by its <label>'s when it has one (a tap on either works).
      const own = el.getBoundingClientRect();
      const label = el.closest("label")?.getBoundingClientRect() ?? own;
      const r = {
        width: Math.max(own.right, label.right) - Math.min(own.left, label.left),
        height: Math.max(own.bottom, label.bottom) - Math.min(own.top, label.top),
      };
      if (r.width < min || r.height < min) {
        const name = text(el) || el.getAttribute("aria-label") || el.getAttribute("name") || "";
        small.push(`${el.tagName.toLowerCase()} "${name.slice(0, 40)}" ${Math.round(r.width)}×${Math.round(r.height)}`);
      }
    }
    return small;
  }, MIN_TARGET);
}

for (const p of PAGES) {
  test(`a11y: ${p.name} has no serious or critical axe violation, light and dark, desktop and phone`, async ({
    browser,
  }) => {
    const found: string[] = [];
    for (const scheme of SCHEMES) {
      for (const size of WIDTHS) {
        const { context, page } = await open(browser, p, scheme, size);
        for (const v of await axeViolations(page)) found.push(`[${scheme}, ${size.name}] ${v}`);
        await context.close();
      }
    }
    expect(found, `axe on ${p.path(fixture)}`).toEqual([]);
  });

  test(`a11y: ${p.name} on a 375 px phone has tap targets of at least 44 × 44 px`, async ({ browser }) => {
    const { context, page } = await open(browser, p, "light", WIDTHS[1]);
    const small = await smallTargets(page);
    await context.close();
    expect(small, `tap targets on ${p.path(fixture)}`).toEqual([]);
  });
}
