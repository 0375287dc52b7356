// Opens XProf's Memory Profile tool for one run in TensorBoard's profile plugin,
// in Debian's headless Chromium driven by playwright-core, and writes a
// screenshot. Run by tests/browser/tensorboard_check.py (make tensorboard-check).
//   node memory_profile_shot.mjs BASE_URL RUN OUT.png
import { chromium } from "playwright-core";
const [base, run, out] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
const errors = [];
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
await page.goto(`${base}/data/plugin/profile/index.html`, { waitUntil: "networkidle" });
await page.waitForTimeout(2000);
async function choose(label, option) {
  if ((await page.locator("mat-select:visible").count()) === 0) {
    // The side panel closes after each choice: open it again.
    await page.locator("mat-icon", { hasText: "menu" }).first().click();
    await page.waitForTimeout(1000);
  }
  const select = page.locator("mat-select:visible").nth(label);
  await select.click();
  await page.locator("mat-option", { hasText: option }).first().click();
  await page.waitForTimeout(2000);
}
await choose(0, run);
await choose(1, "Memory Profile");
await page.waitForTimeout(5000);
await page.screenshot({ path: out, fullPage: true });
const text = await page.locator("body").innerText();
console.log(JSON.stringify({ errors, text }));
await browser.close();
