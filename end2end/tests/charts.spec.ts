// Charts you can read (issue 29 row 5): full width at any size, text of at least 11 px as
// rendered, markers grouped instead of piled up, the chart window and the throughput series
// chosen by links (aria-current on the current one, with and without JS), and dead tasks
// apart from failed calls.
import { test, expect, Page, APIRequestContext } from "@playwright/test";
import { adminPassword, redis, signIn, waitLive, watchErrors } from "./support";

const run = Date.now();

async function submit(request: APIRequestContext, query: string): Promise<string> {
  const res = await request.post("/api/v1/queries", { data: { query } });
  expect([200, 202]).toContain(res.status());
  return (await res.json()).id;
}

/** Every chart's SVG width against its figure's container, and every text's computed font
 * size and rendered height (marker counts hidden by CSS left out). */
async function measure(page: Page) {
  return page.locator(".charts").first().evaluate(() => {
    const figures = [...document.querySelectorAll("figure.chart")];
    return {
      widths: figures.map((f) => {
        const svg = f.querySelector("svg.chart-svg")!.getBoundingClientRect().width;
        const container = f.parentElement!.getBoundingClientRect().width;
        return { id: f.getAttribute("data-testid"), svg, container };
      }),
      texts: figures.flatMap((f) =>
        [...f.querySelectorAll("svg text")]
          .filter((t) => t.getBoundingClientRect().width > 0)
          .map((t) => ({
            text: t.textContent,
            size: parseFloat(getComputedStyle(t).fontSize),
            height: t.getBoundingClientRect().height,
          })),
      ),
    };
  });
}

test("charts fill their container with text of at least 11 px at 1280, 1920 and 375 px", async ({ page }) => {
  const errors = watchErrors(page);
  await signIn(page);
  for (const [width, height] of [
    [1280, 900],
    [1920, 1080],
    [375, 800],
  ]) {
    await page.setViewportSize({ width, height });
    await page.goto("/admin");
    await waitLive(page);
    const { widths, texts } = await measure(page);
    expect(widths.length, "charts on the overview").toBeGreaterThanOrEqual(6);
    for (const w of widths) {
      expect(w.svg / w.container, `${width} px: ${w.id} ${w.svg} of ${w.container}`).toBeGreaterThanOrEqual(0.9);
    }
    expect(texts.length).toBeGreaterThan(20);
    for (const t of texts) {
      expect(t.size, `${width} px: "${t.text}" font size`).toBeGreaterThanOrEqual(11);
      expect(t.height, `${width} px: "${t.text}" rendered height`).toBeGreaterThanOrEqual(11);
    }
    // No sideways scrolling of the page at any width.
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow, `${width} px`).toBeLessThanOrEqual(0);
  }
  expect(errors).toEqual([]);
});

test("markers close together are one, with their count, and never overlap", async ({ page, browser }) => {
  // A pause and a resume seconds apart (the admin's buttons, without JS: a plain form post).
  const context = await browser.newContext({ javaScriptEnabled: false });
  const nojs = await context.newPage();
  try {
    await nojs.goto("/admin/login");
    await nojs.getByTestId("login-password").fill(adminPassword);
    await nojs.getByTestId("login-submit").click();
    await nojs.goto("/admin");
    await nojs.getByTestId("pause").click();
    await expect(nojs.getByTestId("action-result")).toContainText("paused");
    await nojs.getByTestId("resume").click();
    await expect(nojs.getByTestId("action-result")).toHaveText("resumed");
  } finally {
    redis("DEL", "{repoll}:paused");
    await context.close();
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  await signIn(page);
  const markers = page.locator("[data-testid=throughput-chart] [data-testid=chart-marker]");
  await expect(markers.first()).toBeAttached();
  // The pause and the resume are one marker, counting both, its tooltip naming both.
  const grouped = await markers.evaluateAll((gs) =>
    gs.map((g) => ({ count: Number(g.getAttribute("data-count")), tip: g.querySelector("title")!.textContent! })),
  );
  const both = grouped.find((g) => g.tip.includes("paused") && g.tip.includes("resumed"));
  expect(both, JSON.stringify(grouped)).toBeDefined();
  expect(both!.count).toBeGreaterThanOrEqual(2);
  expect(both!.tip.split("\n").length).toBe(both!.count);
  // No two markers' labels overlap, in any chart.
  const boxes = await page
    .locator("figure.chart [data-testid=chart-marker] text")
    .evaluateAll((ts) =>
      ts.map((t) => {
        const r = t.getBoundingClientRect();
        const fig = t.closest("figure")!.getAttribute("data-testid");
        return { fig, l: r.left, r: r.right, t: r.top, b: r.bottom };
      }),
    );
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const [a, b] = [boxes[i], boxes[j]];
      if (a.fig !== b.fig) continue;
      const overlap = a.l < b.r && b.l < a.r && a.t < b.b && b.t < a.b;
      expect(overlap, `${a.fig}: ${JSON.stringify(a)} overlaps ${JSON.stringify(b)}`).toBe(false);
    }
  }
});

test("the active window and series are marked, and the chooser changes what is plotted", async ({ page, browser }) => {
  const errors = watchErrors(page);
  await signIn(page);
  const windows = page.getByTestId("chart-window");
  await expect(windows.locator("[aria-current=page]")).toHaveText("last hour");
  // Marked visibly, not only for a screen reader: the current tab looks unlike the others.
  const look = (name: string) =>
    windows.getByRole("link", { name }).evaluate((a) => {
      const s = getComputedStyle(a);
      return `${s.fontWeight} ${s.backgroundColor} ${s.borderTopColor} ${s.color}`;
    });
  expect(await look("last hour")).not.toBe(await look("last 24 hours"));
  await windows.getByRole("link", { name: "last 24 hours" }).click();
  await expect(page).toHaveURL(/window=24h/);
  await expect(windows.locator("[aria-current=page]")).toHaveText("last 24 hours");
  await expect(page.getByTestId("throughput-chart").locator("svg.chart-svg")).toHaveAttribute(
    "aria-label",
    "throughput per minute, last 24 hours",
  );

  // All four series, then the dead tasks alone (the window kept).
  const chart = page.getByTestId("throughput-chart");
  await expect(chart.locator("polyline")).toHaveCount(4);
  await page.getByTestId("chart-plot-dead").click();
  await expect(page).toHaveURL(/window=24h&plot=dead/);
  await expect(page.getByTestId("chart-plot-dead")).toHaveAttribute("aria-current", "page");
  await expect(chart).toHaveAttribute("data-plot", "dead");
  await expect(chart.locator("polyline")).toHaveCount(1);
  await expect(chart.locator("polyline.s-dead")).toHaveCount(1);
  await expect(chart.locator("svg.chart-svg")).toHaveAttribute("aria-label", "dead tasks per minute, last 24 hours");
  expect(errors).toEqual([]);

  // Without JS the same links choose.
  const context = await browser.newContext({ javaScriptEnabled: false });
  const nojs = await context.newPage();
  try {
    await nojs.goto("/admin/login");
    await nojs.getByTestId("login-password").fill(adminPassword);
    await nojs.getByTestId("login-submit").click();
    await nojs.goto("/admin");
    await nojs.getByTestId("chart-plot-failed").click();
    await expect(nojs).toHaveURL(/plot=failed/);
    await expect(nojs.getByTestId("throughput-chart").locator("polyline")).toHaveCount(1);
    await expect(nojs.getByTestId("throughput-chart").locator("polyline.s-failed")).toHaveCount(1);
    await expect(nojs.getByTestId("chart-plot-failed")).toHaveAttribute("aria-current", "page");
  } finally {
    await context.close();
  }
});

test("a dead task shows as one dead task, apart from its failed calls", async ({ page, request }) => {
  test.setTimeout(90_000);
  // A minute 40 minutes ago (before this run's Redis: nothing real in it) as fail.lua leaves
  // it when calls failed 50 times and one task died of it: 50 failed, 1 dead. 50 is more than
  // the real deaths other specs leave in any one minute, so the dead plot's scale tells which
  // number it drew.
  const [secs] = redis("TIME").split("\n");
  const minute = Math.floor(Number(secs) / 60) * 60_000 - 40 * 60_000;
  expect(redis("ZRANGEBYSCORE", "{repoll}:tpmin", String(minute), String(minute)), "the fixture minute is empty").toBe("");
  redis("HSET", "{repoll}:tp", `${minute}:failed`, "50", `${minute}:dead`, "1");
  redis("ZADD", "{repoll}:tpmin", String(minute), String(minute));
  // And a real one: five 500s, then dead (max attempts).
  const id = await submit(request, `charts-dead-${run} fail=500 polls=1`);
  try {
    await expect(async () => {
      expect((await (await request.get(`/api/v1/queries/${id}`)).json()).status).toBe("failed");
    }).toPass({ timeout: 60_000 });
    await signIn(page);
    const hhmm = new Date(minute).toISOString().slice(11, 16);
    const tips = await page.locator("[data-testid=throughput-chart] .tips title").allTextContents();
    expect(tips).toContain(`${hhmm} UTC · 0 completed, 50 failed calls, 1 dead task, 0 polled`);
    // The real death is counted as a dead task in its minute (the scripts' own counter).
    const dead = tips
      .map((t) => t.match(/^(\d\d:\d\d) UTC · \d+ completed, \d+ failed calls?, (\d+) dead tasks?/))
      .filter((m) => m && m[1] !== hhmm)
      .reduce((n, m) => n + Number(m![2]), 0);
    expect(dead, tips.slice(-5).join(" | ")).toBeGreaterThanOrEqual(1);
    // The dead-tasks plot alone draws the fixture minute at 1/min, not 50: its scale reaches
    // the most deaths of any minute (the other specs' real ones too), and stays under 50.
    const mostDead = Math.max(
      ...tips.map((t) => Number(t.match(/, (\d+) dead tasks?,/)?.[1] ?? 0)),
    );
    expect(mostDead).toBeGreaterThanOrEqual(1);
    expect(mostDead).toBeLessThan(50);
    await page.getByTestId("chart-plot-dead").click();
    await expect(page.getByTestId("throughput-chart")).toHaveAttribute("data-plot", "dead");
    const top = page.getByTestId("throughput-chart").locator(".y-axis text").last();
    const scaleOf = async () => Number(((await top.textContent()) ?? "").split("/")[0]);
    await expect.poll(scaleOf, { message: "the dead plot's scale" }).toBeLessThan(50);
    const scale = await scaleOf();
    expect(scale, "the dead plot's scale").toBeGreaterThanOrEqual(mostDead);
    expect(scale, "the dead plot's scale").toBeLessThan(50);
  } finally {
    redis("HDEL", "{repoll}:tp", `${minute}:failed`, `${minute}:dead`);
    redis("ZREM", "{repoll}:tpmin", String(minute));
  }
});

test("series colours are at least 4.5:1 in light and dark", async ({ page }) => {
  await signIn(page);
  for (const colorScheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme });
    await page.goto("/admin");
    await waitLive(page);
    const pairs = await page.locator(".charts").first().evaluate(() => {
      const rgb = (c: string) => c.match(/[\d.]+/g)!.slice(0, 3).map(Number);
      const lum = (c: string) => {
        const [r, g, b] = rgb(c).map((v) => {
          const s = v / 255;
          return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
      };
      const ratio = (a: string, b: string) => {
        const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
        return (x + 0.05) / (y + 0.05);
      };
      // The panel the caption sits on: the first ancestor with a background.
      const bg = (e: Element) => {
        for (let n: Element | null = e; n; n = n.parentElement) {
          const c = getComputedStyle(n).backgroundColor;
          if (!/rgba\(0, 0, 0, 0\)|transparent/.test(c)) return c;
        }
        return "rgb(255, 255, 255)";
      };
      const out: { what: string; ratio: number }[] = [];
      for (const fig of document.querySelectorAll("figure.chart")) {
        const svg = fig.querySelector("svg.chart-svg")!;
        const chartBg = getComputedStyle(svg).backgroundColor;
        for (const l of fig.querySelectorAll("polyline, circle")) {
          const s = getComputedStyle(l);
          const c = l.tagName === "circle" ? s.fill : s.stroke;
          out.push({ what: `${fig.getAttribute("data-testid")} ${l.getAttribute("class")} line`, ratio: ratio(c, chartBg) });
        }
        for (const t of fig.querySelectorAll("figcaption [class^='s-'], svg text")) {
          const c = t.tagName === "text" ? getComputedStyle(t).fill : getComputedStyle(t).color;
          const under = t.tagName === "text" ? chartBg : bg(t);
          out.push({ what: `${fig.getAttribute("data-testid")} "${t.textContent}"`, ratio: ratio(c, under) });
        }
      }
      return out;
    });
    expect(pairs.length).toBeGreaterThan(20);
    for (const p of pairs) expect(p.ratio, `${colorScheme}: ${p.what}`).toBeGreaterThanOrEqual(4.5);
  }
});

test("each chart names its lines, and a point's values are read by pointer and by keys", async ({ page }) => {
  // Issue 43 row 8: a legend beyond the caption's colours, and a value readout on hover and
  // focus (the native tooltips stay: they are what a page without JavaScript reads).
  const errors = watchErrors(page);
  await page.setViewportSize({ width: 1280, height: 900 });
  await signIn(page);
  const chart = page.getByTestId("throughput-chart");
  await expect(chart.getByTestId("chart-legend").locator("li")).toHaveText([
    "completed",
    "failed calls",
    "dead tasks",
    "polled",
  ]);
  for (const id of ["ttr-chart", "answers-chart", "hit-ratio-chart"]) {
    await expect(page.getByTestId(id).getByTestId("chart-legend").locator("li").first()).toBeVisible();
  }
  const svg = chart.locator("svg.chart-svg");
  const readout = chart.getByTestId("chart-readout");
  const words = chart.getByTestId("chart-readout-words");
  const tips = () => chart.locator(".tips title").allTextContents();
  await expect(readout).toHaveCount(0);

  // The pointer at a third of the width: the readout is that point's time and counts, a line
  // each, in a box inside the chart.
  const box = (await svg.boundingBox())!;
  await page.mouse.move(box.x + box.width / 3, box.y + box.height / 2);
  await expect(readout).toBeVisible();
  const lines = readout.locator("tspan");
  await expect(lines).toHaveCount(5);
  await expect(lines.first()).toHaveText(/^\d\d:\d\d UTC$/);
  await expect(lines.nth(1)).toHaveText(/^\d+ completed$/);
  const r = (await readout.locator("rect").boundingBox())!;
  expect(r.x).toBeGreaterThanOrEqual(box.x);
  expect(r.x + r.width).toBeLessThanOrEqual(box.x + box.width);
  expect(await words.textContent()).toContain((await lines.first().textContent())!);
  await page.mouse.move(box.x + box.width / 2, box.y + box.height + 150);
  await expect(readout).toHaveCount(0);

  // The keyboard: the chart takes focus; ← reads the last complete point, Home the first,
  // Esc hides. The words go to a live region for screen readers.
  // (Each try starts over: a new minute shifts the points under a choice.)
  await svg.focus();
  await expect(async () => {
    await page.keyboard.press("Escape");
    await page.keyboard.press("ArrowLeft");
    await expect(readout).toBeVisible({ timeout: 1_000 });
    const all = await tips();
    expect(await words.textContent()).toBe(all[all.length - 2]);
  }).toPass({ timeout: 10_000 });
  await expect(async () => {
    await page.keyboard.press("Home");
    expect(await words.textContent()).toBe((await tips())[0]);
  }).toPass({ timeout: 10_000 });
  await page.keyboard.press("Escape");
  await expect(readout).toHaveCount(0);
  expect(errors).toEqual([]);
});

test("the readout and the keyboard stay on a chart through a live update", async ({ page, request }) => {
  // The overview rebuilds its charts at every live update (each second under load): the point
  // being read, and the chart holding the keyboard, must outlive that (chart/readout.rs,
  // ChartFocus).
  const errors = watchErrors(page);
  await page.setViewportSize({ width: 1280, height: 900 });
  await signIn(page);
  const chart = page.getByTestId("throughput-chart");
  const svg = chart.locator("svg.chart-svg");
  await svg.focus();
  await page.keyboard.press("ArrowLeft");
  const words = chart.getByTestId("chart-readout-words");
  await expect(words).toHaveText(/^\d\d:\d\d UTC · /);
  const read = (await words.textContent())!;
  // A query submitted and answered makes live updates: the page re-renders its charts from the
  // new data (the stored results' count is one of them).
  const stored = page.getByTestId("count-results");
  const before = Number(await stored.textContent());
  await submit(request, `charts-live-${run} polls=1`);
  await expect(async () => {
    expect(Number(await stored.textContent())).toBeGreaterThan(before);
  }).toPass({ timeout: 15_000 });
  await expect(chart.getByTestId("chart-readout")).toBeVisible();
  await expect(words).toHaveText(read);
  expect(await svg.evaluate((el) => document.activeElement === el), "the rebuilt chart has the keyboard").toBe(true);
  // Its keys go on from the point chosen before.
  await page.keyboard.press("ArrowLeft");
  await expect(words).not.toHaveText(read);
  expect(errors).toEqual([]);
});
