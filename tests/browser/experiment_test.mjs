// The Experiment page against the Fashion-MNIST demo; run by experiment.sh.
// Every wait is Playwright's polling or a deadline, never a fixed sleep; the
// first failure stops the run (later checks build on its state).
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('experiment', { uiTimeoutMs: 60_000 });
const { byTestId, expectText, expectEnabled, expectImageLoaded, screenshot, check } = h;

async function main() {
  await h.startDemo(['--epochs', '1', '--limit-batches', '5']);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1440, height: 1000 }));
  const consoleErrors = collectConsoleErrors(page);
  await page.goto(base);

  await check("a card's Experiment button opens the page on its layer", async () => {
    await byTestId('experiment-link-features.3').click();
    await page.waitForURL(/\/experiment\?layer=features\.3/, { timeout: h.uiTimeoutMs });
    await page.locator('[data-testid="experiment-layer"]').waitFor({ timeout: h.uiTimeoutMs });
    await page.waitForFunction(() => document.querySelector('[data-testid="experiment-layer"]')?.value === 'features.3');
    // Grad-CAM cannot use a linear layer: its option is disabled.
    await page
      .waitForFunction(
        // The page sets each option's value as a property, not an attribute.
        () =>
          [...document.querySelectorAll('[data-testid="experiment-layer"] option')].find((o) => o.value === 'classifier.1')
            ?.disabled === true,
        null,
        { timeout: h.uiTimeoutMs },
      )
      .catch(async () => {
        const options = await page.evaluate(() =>
          [...document.querySelectorAll('[data-testid="experiment-layer"] option')].map((o) => `${o.value}:${o.disabled}`),
        );
        throw new Error(`classifier.1 should be disabled for Grad-CAM; options ${options.join(' ')}`);
      });
    await expectText('experiment-description', /Grad-CAM/);
  });

  await check('the form shows its labels and the kind in full', async () => {
    const cut = await page.evaluate(() => {
      const form = document.querySelector('[data-testid="experiment-form"]');
      const problems = [];
      for (const span of form.querySelectorAll('.form-row > span')) {
        if (span.scrollWidth > span.clientWidth + 1) problems.push(`label "${span.textContent}" is cut`);
      }
      const select = document.querySelector('[data-testid="experiment-kind"]');
      const style = getComputedStyle(select);
      const ctx = document.createElement('canvas').getContext('2d');
      ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
      for (const option of select.options) {
        // The text plus the arrow and padding must fit the select.
        const need = ctx.measureText(option.text).width + 28;
        if (need > select.clientWidth) problems.push(`"${option.text}" needs ${Math.ceil(need)}px of ${select.clientWidth}`);
      }
      return problems;
    });
    if (cut.length) throw new Error(cut.join('; '));
  });

  // Progress and results come over the push channel: the page never asks for
  // a result while a run goes on (only on a reconnect).
  const resultFetches = [];
  page.on('request', (r) => {
    if (r.url().includes('/api/experiments/result')) resultFetches.push(r.url());
  });

  await check('an empty number is named, not sent', async () => {
    await byTestId('param-batch').fill('');
    await byTestId('experiment-run').click();
    await expectText('experiment-error', 'Enter a number for: Inputs');
    await byTestId('param-batch').fill('3');
  });

  await check('Grad-CAM runs and shows a map per sample; overlay redraws it', async () => {
    await byTestId('experiment-run').click();
    await page.locator('[data-testid="experiment-status"][data-stage="done"]').waitFor({ timeout: h.uiTimeoutMs });
    await expectText('experiment-status', /Grad-CAM \(Captum\) — done/);
    await expectImageLoaded('experiment-picture');
    const before = await byTestId('experiment-picture').getAttribute('src');
    await byTestId('experiment-overlay').check();
    await page.waitForFunction(
      (src) => document.querySelector('[data-testid="experiment-picture"]')?.getAttribute('src') !== src,
      before,
      { timeout: h.uiTimeoutMs },
    );
    await screenshot('gradcam-overlay');
  });

  await check('Deep Dream shows progress pushed to the page, and Cancel stops it early', async () => {
    await byTestId('experiment-kind').selectOption('deep_dream');
    await byTestId('param-steps').fill('10000');
    await byTestId('experiment-run').click();
    await expectText('experiment-status', /Deep Dream — running · step \d+\/10000/);
    // The step counter moves on by itself.
    const stepOf = async () =>
      Number((await byTestId('experiment-status').textContent()).match(/step (\d+)\/10000/)?.[1] ?? -1);
    const first = await stepOf();
    await page.waitForFunction(
      (s) => {
        const m = document.querySelector('[data-testid="experiment-status"]')?.textContent.match(/step (\d+)\/10000/);
        return m && Number(m[1]) > s;
      },
      first,
      { timeout: h.uiTimeoutMs },
    );
    await expectEnabled('experiment-cancel', true);
    await expectImageLoaded('experiment-picture');
    await byTestId('experiment-cancel').click();
    await page.locator('[data-testid="experiment-status"][data-stage="stopped"]').waitFor({ timeout: h.uiTimeoutMs });
    await expectText('experiment-status', /stopped early \(cancelled\)/);
    await screenshot('deep-dream-cancelled');
    if (resultFetches.length) throw new Error(`the page polled for results: ${resultFetches.join(' ')}`);
  });

  await check('Deep Dream from the current batch shows the start beside the dreams', async () => {
    await byTestId('param-start').selectOption('sample');
    await byTestId('param-steps').fill('20');
    await byTestId('param-channels').fill('4');
    const before = await byTestId('experiment-status').getAttribute('data-seq');
    await byTestId('experiment-run').click();
    await page.waitForFunction(
      (seq) => {
        const el = document.querySelector('[data-testid="experiment-status"]');
        return el?.dataset.stage === 'done' && el.dataset.seq !== seq;
      },
      before,
      { timeout: h.uiTimeoutMs },
    );
    await expectImageLoaded('experiment-picture');
    // One row of square captioned tiles: the start, then one dream per
    // channel (5 tiles are about 4.3 times as wide as high; 4 would be 3.4).
    await page.waitForFunction(
      () => {
        const img = document.querySelector('[data-testid="experiment-picture"]');
        return img && img.naturalWidth > 3.9 * img.naturalHeight;
      },
      null,
      { timeout: h.uiTimeoutMs },
    );
    await screenshot('deep-dream-from-sample');
  });

  await check("auto-run re-runs this tab's experiment at every snapshot, pushed to the page", async () => {
    await byTestId('experiment-kind').selectOption('gradcam');
    const before = Number(await byTestId('experiment-status').getAttribute('data-seq'));
    await byTestId('experiment-auto-run').check();
    // Registering runs it once in the pause ...
    await page.waitForFunction(
      (seq) => {
        const el = document.querySelector('[data-testid="experiment-status"]');
        return el?.dataset.stage === 'done' && Number(el.dataset.seq) > seq && /Grad-CAM/.test(el.textContent);
      },
      before,
      { timeout: h.uiTimeoutMs },
    );
    const registered = await h.demo.api('/api/experiments');
    if (registered.auto_experiments.length !== 1 || registered.auto_experiments[0].kind !== 'gradcam') {
      throw new Error(`one gradcam auto experiment expected: ${JSON.stringify(registered.auto_experiments)}`);
    }
    const first = Number(await byTestId('experiment-status').getAttribute('data-seq'));
    // ... and again at the next snapshot.
    await h.demo.api('/api/step', { unit: 'batch', timeout_seconds: 30 });
    await page.waitForFunction(
      (seq) => {
        const el = document.querySelector('[data-testid="experiment-status"]');
        return el?.dataset.stage === 'done' && Number(el.dataset.seq) > seq;
      },
      first,
      { timeout: h.uiTimeoutMs },
    );
    await byTestId('experiment-auto-run').uncheck();
    await page.waitForFunction(
      async () => (await (await fetch('/api/experiments')).json()).auto_experiments.length === 0,
      null,
      { timeout: h.uiTimeoutMs },
    );
    if (resultFetches.length) throw new Error(`the page polled for results: ${resultFetches.join(' ')}`);
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });
}

await h.run(main);
