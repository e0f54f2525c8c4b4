import { defineConfig } from "@playwright/test";
import * as os from "os";
import * as path from "path";
import * as fs from "fs";

// The suite runs against the release build in headless Debian Chromium (Playwright's own
// browser download is not available here). The server is started by Playwright with its own
// managed redis-server in a fresh temporary directory, on a port of its own, so it never
// touches a Redis or a demo server already running on this machine.
const port = Number(process.env.E2E_PORT ?? 3117);
// Fixed ports for the managed Redis and the embedded simulator so tests can reach them
// directly (to verify state in Redis, read the simulator's stats, or start a worker process).
export const redisPort = Number(process.env.E2E_REDIS_PORT ?? 6417);
export const simPort = Number(process.env.E2E_SIM_PORT ?? 9117);
export const adminPassword = "e2e-admin-password";
// The managed Redis always has a password (a random one unless given); the tests read Redis
// directly, so they give it one.
const redisPassword = "e2e-redis-password";
process.env.E2E_REDIS_URL = `redis://default:${redisPassword}@127.0.0.1:${redisPort}/0`;
process.env.E2E_SIM_URL = `http://127.0.0.1:${simPort}`;
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "repoll-e2e-"));
const root = path.resolve(__dirname, "..");

export default defineConfig({
  testDir: "./tests",
  timeout: 60_000,
  expect: { timeout: 10_000 },
  fullyParallel: false,
  workers: 1,
  // One retry in CI, as a report only: a test that needed it is "flaky", and scripts/test fails
  // the run unless the test is on end2end/flaky-allowlist.txt with an open reason.
  retries: process.env.CI ? 1 : 0,
  reporter: [["list"]],
  outputDir: "test-results",
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    trace: "off",
    screenshot: "only-on-failure",
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    },
  },
  webServer: {
    command: `${path.join(root, "target/release/repoll")} serve --sim`,
    cwd: root,
    url: `http://127.0.0.1:${port}/readyz`,
    reuseExistingServer: false,
    timeout: 60_000,
    stdout: "pipe",
    stderr: "pipe",
    env: {
      REPOLL_ADDR: `127.0.0.1:${port}`,
      LEPTOS_SITE_ROOT: path.join(root, "target/site"),
      REPOLL_MANAGED_REDIS_DIR: dataDir,
      RUST_LOG: "info",
      REDIS_URL: "",
      REPOLL_MANAGED_REDIS_PORT: String(redisPort),
      REPOLL_MANAGED_REDIS_PASSWORD: redisPassword,
      REPOLL_SIM_ADDR: `127.0.0.1:${simPort}`,
      REPOLL_UPSTREAM_URL: `http://127.0.0.1:${simPort}/api/query?q={key}`,
      REPOLL_POLL_INTERVAL_MS: "250",
      REPOLL_WORKERS: "16",
      // Every test submits from 127.0.0.1, one client to the limiter; the limit itself is
      // tested in server/tests/api.rs. A high limit keeps submissions from waiting on 429s.
      REPOLL_RATE_PER_MIN: "6000",
      REPOLL_RATE_BURST: "1000",
      // The suite makes its upstream fail on purpose (dead tasks to retry, purge and search:
      // `fail=500`), which would open the default breaker and hold the next tests' tasks for
      // its 30 s cool-down. Off here: the breaker opening by itself is tested in Rust
      // (server/tests/process_settings.rs, worker/tests/breaker.rs); here an admin opens and
      // closes it by hand.
      REPOLL_BREAKER_FAILURES: "0",
      REPOLL_ADMIN_PASSWORD: adminPassword,
    },
  },
});
