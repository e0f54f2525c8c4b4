// Helpers shared by the specs: the suite's own Redis (through redis-cli), signing in to the
// dashboard, a second `repoll serve` with settings of its own, and a Redis proxy that holds
// commands back. The web server, its Redis and the simulator are started by
// playwright.config.ts on fixed ports; E2E_REDIS_URL names that Redis.
import { expect, Page } from "@playwright/test";
import { ChildProcess, execFileSync, spawn } from "child_process";
import { createHash } from "crypto";
import * as net from "net";
import * as path from "path";

export const redisUrl = process.env.E2E_REDIS_URL!;
export const adminPassword = "e2e-admin-password";

/** One redis-cli command against the suite's Redis; its output, trimmed. */
export function redis(...args: string[]): string {
  return execFileSync("redis-cli", ["--no-auth-warning", "-u", redisUrl, ...args]).toString().trim();
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

/** A string as one redis-cli argument. */
export const quote = (s: string) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

/** redis-cli lines that create a dead task of `query` that died with `error` at `at`, in the
 * queue's own record layout (ARCHITECTURE.md: `{q}:t:<id>`, the dead zset). */
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

/** A second `repoll serve` on the suite's Redis (or on `redisUrl` given in `env`), for the
 * tests that need a setting of their own or a Redis connection they control; no embedded
 * workers (the suite's server does the work). `stop()` ends it. */
export interface Served {
  url: string;
  log: () => string;
  stop: () => Promise<void>;
}

/** A TCP port nobody listens on now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

export async function spawnServe(env: Record<string, string>): Promise<Served> {
  const root = path.resolve(__dirname, "..", "..");
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  let out = "";
  const child: ChildProcess = spawn(path.join(root, "target/release/repoll"), ["serve"], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/tmp",
      RUST_LOG: "info",
      REPOLL_ADDR: `127.0.0.1:${port}`,
      LEPTOS_SITE_ROOT: path.join(root, "target/site"),
      REDIS_URL: redisUrl,
      REPOLL_WORKERS: "0",
      REPOLL_UPSTREAM_URL: `${process.env.E2E_SIM_URL}/api/query?q={key}`,
      REPOLL_RATE_PER_MIN: "6000",
      REPOLL_RATE_BURST: "1000",
      REPOLL_ADMIN_PASSWORD: adminPassword,
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const killed = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(killed);
    }
  };
  // Ready when /readyz answers 200; a hang guard, not a speed.
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`repoll serve exited:\n${out}`);
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`repoll serve not ready within 60 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, log: () => out, stop };
}

/** A TCP proxy in front of the suite's Redis that can hold a client's commands back: a
 * connection whose client→server bytes contain `holdAt` is held from that read on (those bytes
 * are not sent); one containing `holdAfter` forwards that read and holds what follows. Held
 * bytes wait in the proxy (nothing is lost) until `release()`, which sends them and stops
 * holding for good. Replies from Redis always flow. */
export interface RedisProxy {
  /** The suite's Redis URL with the proxy's port. */
  url: string;
  /** Resolves when a connection is first held. */
  held: Promise<void>;
  release: () => void;
  close: () => Promise<void>;
}

export async function redisProxy(opts: { holdAt?: Buffer; holdAfter?: Buffer }): Promise<RedisProxy> {
  const target = new URL(redisUrl);
  const sockets = new Set<net.Socket>();
  const waiting: Array<() => void> = [];
  let released = false;
  let markHeld!: () => void;
  const held = new Promise<void>((resolve) => (markHeld = resolve));
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(client);
    sockets.add(upstream);
    let holding = false;
    let pending: Buffer[] = [];
    // The last bytes seen, so a pattern split across two reads is still found.
    let tail = Buffer.alloc(0);
    const has = (p: Buffer | undefined, seen: Buffer) => p !== undefined && seen.includes(p);
    client.on("data", (chunk: Buffer) => {
      if (holding) {
        pending.push(chunk);
        return;
      }
      const seen = Buffer.concat([tail, chunk]);
      tail = seen.subarray(Math.max(0, seen.length - 256));
      if (released) {
        upstream.write(chunk);
        return;
      }
      if (has(opts.holdAt, seen)) {
        holding = true;
        pending.push(chunk);
      } else {
        upstream.write(chunk);
        if (has(opts.holdAfter, seen)) holding = true;
      }
      if (holding) {
        markHeld();
        waiting.push(() => {
          holding = false;
          for (const b of pending) upstream.write(b);
          pending = [];
        });
      }
    });
    upstream.on("data", (d) => client.write(d));
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", end);
    upstream.on("close", end);
    client.on("error", end);
    upstream.on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  const url = new URL(redisUrl);
  url.port = String(port);
  return {
    url: url.toString(),
    held,
    release: () => {
      released = true;
      for (const w of waiting.splice(0)) w();
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
