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

  await check('Deep Dream shows progress, and Cancel stops it early', async () => {
    await byTestId('experiment-kind').selectOption('deep_dream');
    await byTestId('param-steps').fill('10000');
    await byTestId('experiment-run').click();
    await expectText('experiment-status', /Deep Dream — running · step \d+\/10000/);
    await expectEnabled('experiment-cancel', true);
    await expectImageLoaded('experiment-picture');
    await byTestId('experiment-cancel').click();
    await page.locator('[data-testid="experiment-status"][data-stage="stopped"]').waitFor({ timeout: h.uiTimeoutMs });
    await expectText('experiment-status', /stopped early \(cancelled\)/);
    await screenshot('deep-dream-cancelled');
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });
}

await h.run(main);
