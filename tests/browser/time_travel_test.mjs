// The Time Travel dialog against the Fashion-MNIST demo; run by time_travel.sh.
// Waits with Playwright's polling or deadlines, never fixed sleeps; the first
// failure stops the run.
import { Harness, collectConsoleErrors, escapeRegExp } from './harness.mjs';

const h = new Harness('time_travel', { uiTimeoutMs: 30_000 });
const { byTestId, expectText, expectEnabled, screenshot, check } = h;
const UI_TIMEOUT_MS = h.uiTimeoutMs;

async function main() {
  await h.startDemo(['--epochs', '2', '--limit-batches', '5']);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1400, height: 900 }));
  const consoleErrors = collectConsoleErrors(page, { uncaught: false });
  await page.goto(base);

  await check('paused at the first batch', async () => {
    await expectText('position-label', /^\s*epoch 0\/2 \| train batch 0\b/);
  });

  await check('two steps later, Time Travel is enabled', async () => {
    for (const _ of [1, 2]) await h.demo.api('/api/step', { unit: 'batch', timeout_seconds: 30 });
    await expectText('position-label', /^\s*epoch 0\/2 \| train batch 2\b/);
    await expectEnabled('time-travel', true);
  });

  await check('the dialog shows epoch 0 cached and epoch 1 not yet', async () => {
    await byTestId('time-travel').click();
    await byTestId('time-travel-dialog').waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    await expectText('time-travel-cached', 'Cached epochs: 0');
    await expectText('time-travel-epoch', 'epoch 0');
    await expectText('time-travel-uncached', /Uncached epochs: 1\b.*once training has passed their start/);
    await byTestId('time-travel-cache-all').waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    await screenshot('dialog');
  });

  await check('a refusal shows "Time travel failed" with the server message', async () => {
    const message = 'epoch 0 is not cached (test refusal)';
    await page.route('**/api/time_travel', (route) =>
      route.request().method() === 'POST'
        ? route.fulfill({ status: 409, contentType: 'application/json', body: JSON.stringify({ error: message }) })
        : route.continue(),
    );
    await byTestId('time-travel-go').click();
    await expectText('time-travel-error', new RegExp(`Time travel failed\\s*${escapeRegExp(message)}`));
    await byTestId('time-travel-dialog').waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    await page.unroute('**/api/time_travel');
  });

  await check('Time travel jumps back to epoch 0, batch 0', async () => {
    await byTestId('time-travel-go').click();
    await byTestId('time-travel-dialog').waitFor({ state: 'detached', timeout: UI_TIMEOUT_MS });
    await expectText('position-label', /^\s*epoch 0\/2 \| train batch 0\b/);
    await screenshot('after-jump');
  });

  await check('no console errors', async () => {
    // The routed 409 logs a failed-resource error; that one is expected.
    const unexpected = consoleErrors.filter((e) => !/409/.test(e));
    if (unexpected.length) throw new Error(`console errors: ${unexpected.join(' | ')}`);
  });
}

await h.run(main, { summary: '' });
