// Issue 29, "search": the task search box suggests completions as you type (Oban Web does).
// Typed with the keyboard only — ArrowDown to a suggestion, Enter to take it, Escape to close
// — the completed search is the one the list runs, and it finds exactly the task suggested.
import { test, expect, Page } from "@playwright/test";
import { deadTaskLines, redisPipe, submit, taskId } from "./fixtures";
import { signIn, waitLive, watchErrors } from "./support";

const run = Date.now();
const tenant = `sugg-${run}`;

/** Dead tasks of `tenant`, died `at`; their ids. */
function deadOf(queries: string[], tn: string, at: number): string[] {
  redisPipe(
    queries.flatMap((q) => {
      const [hset, zadd] = deadTaskLines(q, `HTTP 502 from the upstream (suggest ${run})`, at);
      return [`${hset} tn ${tn}`, zadd];
    }),
  );
  return queries.map(taskId);
}

const input = (page: Page) => page.getByTestId("search-input");
const listbox = (page: Page) => page.getByTestId("search-suggestions");

/** Types `text` key by key (as a person does: each key press an input event). */
async function type(page: Page, text: string) {
  await input(page).pressSequentially(text, { delay: 30 });
}

test("suggestions complete the search with the keyboard, and the search finds the task", async ({ page }) => {
  const errors = watchErrors(page);
  // Died just now: the suggestions' bounded read looks at the latest deaths first, however
  // many the other specs left.
  const at = Date.now();
  const ours = deadOf([0, 1, 2].map((i) => `suggest-${run}-${i} polls=1`), tenant, at);
  const other = deadOf([`suggest-${run}-other polls=1`], `other-${run}`, at);
  await signIn(page);
  await page.goto("/admin/tasks");
  await waitLive(page);
  const box = input(page);
  await expect(box).toHaveAttribute("role", "combobox");
  await expect(box).toHaveAttribute("aria-expanded", "false");
  await expect(box).toHaveAttribute("aria-controls", "task-search-options");
  await expect(listbox(page)).toBeHidden();

  // A qualifier's name, then its values at once.
  await type(page, "ten");
  await expect(listbox(page)).toBeVisible();
  await expect(box).toHaveAttribute("aria-expanded", "true");
  const first = listbox(page).getByRole("option").first();
  await expect(first).toContainText("tenant:");
  await page.keyboard.press("ArrowDown");
  await expect(box).toHaveAttribute("aria-activedescendant", "task-search-options-0");
  await expect(first).toHaveAttribute("aria-selected", "true");
  await page.keyboard.press("Enter");
  await expect(box).toHaveValue("tenant:");
  // The tenants seen follow; typing narrows them to ours.
  await type(page, "sugg-");
  const ourOption = listbox(page).getByRole("option", { name: new RegExp(`tenant:${tenant}\\b`) });
  // The server reads what it suggests at most once per 5 s: a read from before our tasks were
  // written may answer first; typing on asks again until the next read has them.
  await expect(async () => {
    await page.keyboard.press("Backspace");
    await type(page, "-");
    await expect(ourOption).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 15_000 });
  await expect(listbox(page).getByRole("option", { name: new RegExp(`tenant:other-${run}`) })).toHaveCount(0);
  // Down to ours (wherever it is in the list), and Enter takes it.
  const options = listbox(page).getByRole("option");
  const index = (await options.allTextContents()).findIndex((t) => t.includes(`tenant:${tenant}`));
  expect(index).toBeGreaterThanOrEqual(0);
  for (let i = 0; i <= index; i++) await page.keyboard.press("ArrowDown");
  await expect(box).toHaveAttribute("aria-activedescendant", `task-search-options-${index}`);
  await page.keyboard.press("Enter");
  await expect(box).toHaveValue(`tenant:${tenant} `);
  await expect(listbox(page)).toBeHidden();
  await expect(page).toHaveURL(/\/admin\/tasks$/); // Enter took the suggestion, not the form

  // Escape closes the suggestions and keeps the text.
  await type(page, "state:d");
  await expect(listbox(page).getByRole("option", { name: /state:dead/ })).toBeVisible();
  await page.keyboard.press("Escape");
  await expect(listbox(page)).toBeHidden();
  await expect(box).toHaveValue(`tenant:${tenant} state:d`);
  // ArrowDown asks again; a click takes a suggestion and leaves the focus in the box.
  await page.keyboard.press("ArrowDown");
  await expect(listbox(page)).toBeVisible();
  await listbox(page).getByRole("option", { name: /state:dead/ }).click();
  await expect(box).toHaveValue(`tenant:${tenant} state:dead `);
  await expect(box).toBeFocused();

  // Nothing highlighted: Enter searches, and the completed search finds exactly ours.
  await page.keyboard.press("Enter");
  await expect(page).toHaveURL(/q=tenant/);
  await waitLive(page);
  for (const id of ours) await expect(page.locator(`tr[data-id="${id}"]`)).toHaveCount(1);
  await expect(page.locator(`tr[data-id="${other[0]}"]`)).toHaveCount(0);
  expect(errors).toEqual([]);

  // The other specs find the queue without ours.
  redisPipe([...ours, ...other].flatMap((id) => [`ZREM {repoll}:dead ${id}`, `DEL {repoll}:t:${id}`]));
});

// Issue 43, row 13: a refused search is shown once; live events do not ask the server again
// for the same refusal (it was re-requested on every event, a 400 each time).
test("a refused search is not asked again on every live event", async ({ page, request }) => {
  const errors = watchErrors(page, [400]);
  await signIn(page);
  await page.goto("/admin/tasks?q=group%3Azz");
  await waitLive(page);
  await expect(page.getByTestId("tasks-error")).toContainText("not a group key");
  const asked: string[] = [];
  page.on("request", (r) => {
    if (r.url().includes("list_tasks")) asked.push(r.url());
  });
  // Live events: new tasks, each published on the dashboard's channel.
  for (let i = 0; i < 6; i++) {
    await submit(request, `refused-search-${run}-${i}`);
    await page.waitForTimeout(500);
  }
  await expect(page.getByTestId("tasks-error")).toContainText("not a group key");
  // Hydration's first read may ask once; no event after it does.
  expect(asked.length, asked.join("\n")).toBeLessThanOrEqual(1);
  expect(errors).toEqual([]);
});
