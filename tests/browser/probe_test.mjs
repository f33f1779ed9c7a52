// The input pane's probe against the Fashion-MNIST demo; run by probe.sh.
// Every wait is Playwright's polling or a deadline, never a fixed sleep; the
// first failure stops the run (later checks build on its state).
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('probe', { uiTimeoutMs: 30_000 });
const { byTestId, expectText, screenshot, check } = h;
const CONV = 'features.0';

// Waits (the page polling the server) until the probe status matches `want`
// on every key given: pinned, mode, active, pending, hasResult, diff,
// perturbations (their count); returns the status.
async function probeWhere(want) {
  // Playwright polls a synchronous predicate (an async one would count as
  // met at once: a promise is truthy), so each poll starts a fetch of
  // /api/probe and judges the latest answer that came back after this call.
  await h.page.evaluate(() => {
    window.__probeWait = { busy: false, last: null };
  });
  try {
    const handle = await h.page.waitForFunction(
      (w) => {
        const slot = window.__probeWait;
        if (!slot.busy) {
          slot.busy = true;
          fetch('/api/probe')
            .then((r) => r.json())
            .then((p) => {
              slot.last = p;
            })
            .finally(() => {
              slot.busy = false;
            });
        }
        const p = slot.last;
        if (!p) return null;
        const seen = {
          pinned: p.pinned,
          mode: p.mode,
          active: p.active,
          pending: p.pending,
          hasResult: p.result != null,
          diff: p.result?.diff ?? null,
          perturbations: p.perturbations.length,
        };
        return Object.entries(w).every(([k, v]) => seen[k] === v) ? p : null;
      },
      want,
      { timeout: h.uiTimeoutMs, polling: 100 },
    );
    return await handle.jsonValue();
  } catch {
    throw new Error(`the probe never became ${JSON.stringify(want)}: ${JSON.stringify(await h.demo.api('/api/probe'))}`);
  }
}

async function main() {
  await h.startDemo(['--epochs', '1', '--limit-batches', '5']);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1440, height: 1000 }));
  const consoleErrors = collectConsoleErrors(page);
  await page.goto(base);

  await check('the input pane offers the probe while paused', async () => {
    await byTestId('input-image').waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('probe').waitFor({ timeout: h.uiTimeoutMs });
    await byTestId(`card-${CONV}`).waitFor({ timeout: h.uiTimeoutMs });
    if (await byTestId('probe-pin').isChecked()) throw new Error('the batch starts pinned');
  });

  await check('Pin batch re-runs it: the caption names the batch, every card shows the probe without gradients', async () => {
    await byTestId('probe-pin').check({ force: true }); // the switch's track covers its input
    await expectText('probe-pinned-at', /pinned at epoch 0/);
    const status = await probeWhere({ pinned: true, hasResult: true, pending: false });
    await expectText('probe-caption', new RegExp(`run ${status.result.run}`));
    await byTestId(`probe-badge-${CONV}`).waitFor({ timeout: h.uiTimeoutMs });
    await expectText(`card-${CONV}`, /No gradients on probe runs/);
    await screenshot('pinned');
  });

  await check('Eval mode re-runs the pinned batch in eval mode', async () => {
    await byTestId('probe-mode-eval').click();
    await probeWhere({ mode: 'eval', hasResult: true, pending: false });
    await page.waitForFunction(
      (sel) => document.querySelector(sel)?.getAttribute('aria-pressed') === 'true',
      '[data-testid="probe-mode-eval"]',
      { timeout: h.uiTimeoutMs },
    );
  });

  await check('a click with perturb on paints the pixel under it; the cards show perturbed − original', async () => {
    await byTestId('probe-perturb').check({ force: true });
    await byTestId('probe-colour').waitFor({ timeout: h.uiTimeoutMs });
    const img = byTestId('input-image');
    const box = await img.boundingBox();
    // The centre of pixel [7, 21] of the 28x28 image.
    await img.click({ position: { x: (21.5 / 28) * box.width, y: (7.5 / 28) * box.height } });
    const status = await probeWhere({ perturbations: 1, diff: true, pending: false });
    const p = status.perturbations[0];
    if (p.index.join() !== '7,21' || p.sample !== 0) throw new Error(`perturbed ${JSON.stringify(p)}, not [7, 21] of sample 0`);
    // White, normalised as the demo normalises ((1 - 0.286) / 0.353).
    if (Math.abs(p.values[0] - (1 - 0.286) / 0.353) > 1e-3) throw new Error(`value ${p.values[0]} is not white`);
    await expectText('probe-count', '1 perturbed pixel');
    await expectText('probe-caption', /perturbed − original/);
    await expectText(`probe-badge-${CONV}`, 'probe Δ');
    await screenshot('perturbed');
  });

  await check('another visitor sees the same probe', async () => {
    const other = await h.newPage({ width: 1200, height: 900 });
    await other.goto(base);
    // "value" until the page knows the input is an image, then "pixel".
    try {
      await other.locator('[data-testid="probe-count"]', { hasText: /^1 perturbed pixel$/ }).waitFor({ timeout: h.uiTimeoutMs });
    } catch {
      throw new Error(`the other page says "${await other.locator('[data-testid="probe-count"]').textContent().catch(() => '(nothing)')}"`);
    }
    if (!(await other.locator('[data-testid="probe-pin"]').isChecked())) throw new Error('the other page is not pinned');
    await other.close();
  });

  await check('Clear removes the perturbation; unpin and Unchanged end the probe and the gradients return', async () => {
    await byTestId('probe-clear').click();
    await probeWhere({ perturbations: 0, diff: false, pending: false });
    await byTestId('probe-pin').uncheck({ force: true });
    await byTestId('probe-mode-unchanged').click();
    await probeWhere({ active: false });
    await page.waitForFunction((sel) => !document.querySelector(sel), `[data-testid="probe-badge-${CONV}"]`, {
      timeout: h.uiTimeoutMs,
    });
    await page.waitForFunction(
      (sel) => !document.querySelector(sel)?.textContent?.includes('No gradients on probe runs'),
      `[data-testid="card-${CONV}"]`,
      { timeout: h.uiTimeoutMs },
    );
    await screenshot('ended');
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });
}

await h.run(main);
