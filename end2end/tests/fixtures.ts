// Fixtures shared by the specs that read or write the queue directly: screenshots (also kept
// for the README under docs/screenshots), tasks submitted through the API, and records written
// into the suite's Redis in the queue's own layout (ARCHITECTURE.md: `{q}:t:<id>` with short
// fields, the dead / due zsets) for states that would take long to reach through the upstream.
import { expect, APIRequestContext, Page } from "@playwright/test";
import { execFileSync } from "child_process";
import { createHash } from "crypto";
import * as fs from "fs";
import * as path from "path";
import { redisUrl } from "./support";

export const root = path.resolve(__dirname, "..", "..");
const shotDir = path.join(__dirname, "..", "test-results", "screenshots");
const docsDir = path.join(root, "docs", "screenshots");

/** A full-page screenshot into test-results/screenshots; with `docs`, also into
 * docs/screenshots, where the README shows it. */
export async function shot(page: Page, name: string, docs = false) {
  fs.mkdirSync(shotDir, { recursive: true });
  const file = path.join(shotDir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  if (docs) {
    fs.mkdirSync(docsDir, { recursive: true });
    fs.copyFileSync(file, path.join(docsDir, `${name}.png`));
  }
}

/** Runs many commands in one redis-cli (one per line, arguments quoted by redis-cli rules). */
export function redisPipe(lines: string[]): string {
  return execFileSync("redis-cli", ["--no-auth-warning", "-u", redisUrl], {
    input: lines.join("\n") + "\n",
    maxBuffer: 64 * 1024 * 1024,
  }).toString();
}

/** The queue's id of a query already in normal form (NFC, trimmed, single spaces). */
export function taskId(query: string): string {
  return createHash("sha256").update(query).digest("hex").slice(0, 32);
}

/** A redis-cli argument in double quotes. */
export const quote = (s: string) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

/** redis-cli lines that create a dead task of `query` that died with `error` at `at`. */
export function deadTaskLines(query: string, error: string, at: number): string[] {
  const id = taskId(query);
  return [
    `HSET {repoll}:t:${id} q ${quote(query)} s dead c ${at - 60_000} u ${at} a 5 m 5 e ${quote(error)} dr max_attempts`,
    `ZADD {repoll}:dead ${at} ${id}`,
  ];
}

/** Writes a dead task of `query` (died now with `error`) into the suite's Redis; its id. */
export function deadTask(query: string, error: string): string {
  redisPipe(deadTaskLines(query, error, Date.now()));
  return taskId(query);
}

/** Creates (or joins) the task of `query` through the public API, waiting out the per-client
 * rate limit; returns its id. */
export async function submit(request: APIRequestContext, query: string): Promise<string> {
  for (let i = 0; i < 30; i++) {
    const res = await request.post("/api/v1/queries", { data: { query } });
    if (res.status() === 429) {
      await new Promise((r) => setTimeout(r, 1000 * Number(res.headers()["retry-after"] ?? 1)));
      continue;
    }
    expect([200, 202]).toContain(res.status());
    return (await res.json()).id;
  }
  throw new Error("rate limited for too long");
}

/** The page background as [r, g, b, a]: the body's, or the root's when the body is transparent. */
export async function background(page: Page): Promise<number[]> {
  const css = await page.evaluate(() => {
    const body = getComputedStyle(document.body).backgroundColor;
    return /rgba\(\s*\d+,\s*\d+,\s*\d+,\s*0\s*\)|transparent/.test(body)
      ? getComputedStyle(document.documentElement).backgroundColor
      : body;
  });
  const m = /rgba?\(([^)]+)\)/.exec(css);
  expect(m, `background ${css}`).not.toBeNull();
  const [r, g, b, a = 1] = m![1].split(",").map((x) => Number(x.trim()));
  return [r, g, b, a];
}

/** Relative luminance (WCAG), 0 black .. 1 white. */
export function luminance([r, g, b]: number[]): number {
  const lin = (c: number) => {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}
