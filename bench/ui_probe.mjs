// Click-to-pixels latency of a probe (see ui_probe.sh). The demo is paused,
// its batch pinned and in eval mode, perturb on; each click on the input
// image paints one pixel, which the server validates, re-runs (two traced
// forwards: perturbed and original) and publishes as a new snapshot the page
// renders. The latency of a click is the page's time of showing every
// visible strip of that snapshot (renderedAtMs; and the frame drawing them,
// paintedAtMs, which the target is judged on) minus the click's time, both
// on the page's clock.
import { openPausedDemo, summary } from './ui_common.mjs';

const [binary, clicksArg] = process.argv.slice(2);
const clicks = Number(clicksArg ?? 30);

const { demo, page, rendered, close } = await openPausedDemo(binary);
try {
  let status;
  await demo.api('/api/probe/pin', { timeout_seconds: 30 });
  const ready = await demo.api('/api/probe/mode', { mode: 'eval', timeout_seconds: 30 });
  await rendered(ready.result.snapshot_sequence);
  await page.locator('[data-testid="probe-perturb"]').check();
  const img = page.locator('[data-testid="input-image"]');
  await page.evaluate(() => {
    // The click's own time, before the page handles it.
    document.addEventListener('click', () => (window.__probeClickAt = Date.now()), { capture: true });
  });

  const shown = [];
  const painted = [];
  for (let i = 0; i < clicks; ++i) {
    const before = await page.evaluate(() => window.__nansense?.renderedSequence ?? 0);
    const box = await img.boundingBox();
    // A different pixel each time (a repeat would replace, not add).
    const y = 1 + (i % 26);
    const x = 1 + ((i * 5 + Math.floor(i / 26)) % 26);
    await img.click({ position: { x: ((x + 0.5) / 28) * box.width, y: ((y + 0.5) / 28) * box.height } });
    await page.waitForFunction(
      (s) => (window.__nansense?.renderedSequence ?? 0) > s && window.__nansense?.paintedAtMs !== undefined,
      before,
      { timeout: 30_000 },
    );
    const m = await page.evaluate(() => ({ ...window.__nansense, clickAt: window.__probeClickAt }));
    shown.push(m.renderedAtMs - m.clickAt);
    painted.push(m.paintedAtMs - m.clickAt);
  }
  status = await demo.api('/api/probe');
  if (status.perturbations.length !== clicks) throw new Error(`${status.perturbations.length} perturbations for ${clicks} clicks`);
  const strips = await page.locator('canvas[data-testid^="strip-activation-"]').count();
  const s = summary(shown);
  const p = summary(painted);
  console.log(`ui_probe: ${clicks} perturbing clicks on the pinned demo CNN batch (eval mode), ${strips} activation strips on the page`);
  console.log(`  click -> probe strips decoded and handed to their canvases: ${s.text}`);
  console.log(`  click -> the frame drawing them produced:                  ${p.text}`);
  console.log(`  target: median <= 200 ms (to the frame) -> ${p.median <= 200 ? 'met' : 'NOT met'}`);
  await demo.api('/api/probe/clear', {});
  await demo.api('/api/probe/unpin', {});
} finally {
  await close();
}
