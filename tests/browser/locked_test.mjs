// A locked, parked playground session (playground_demo serving a frozen
// moment); run by locked.sh. Every wait is Playwright's polling or a deadline.
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('locked', { options: { moment: { type: 'string' } }, uiTimeoutMs: 30_000 });
const { byTestId, expectText, screenshot, check } = h;
const CONV = 'features.0';

async function main() {
  await h.startDemo(['--moment', h.args.moment]);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1440, height: 1000 }));
  const consoleErrors = collectConsoleErrors(page);
  await page.goto(base);

  await check('the bar says locked in place of the run controls', async () => {
    await expectText('locked-chip', /locked/);
    for (const id of ['run', 'pause', 'detach', 'time-travel', 'refresh', 'position-label']) {
      if (await byTestId(id).count()) throw new Error(`[data-testid=${id}] is shown on a locked session`);
    }
  });

  await check('the layers are drawn; no watch eye or probe controls', async () => {
    await byTestId(`card-${CONV}`).waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('input-image').waitFor({ timeout: h.uiTimeoutMs });
    if (await byTestId(`watch-${CONV}`).count()) throw new Error('a watch eye is shown');
    if (await byTestId('probe').count()) throw new Error('the probe controls are shown');
    await screenshot('main');
  });

  await check('the server refuses a step and keeps the moment', async () => {
    const before = await h.demo.api('/api/status');
    const res = await fetch(`${base}/api/step`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    const body = await res.json();
    if (res.status !== 409 || !/locked/.test(body.error)) throw new Error(`step answered ${res.status} ${JSON.stringify(body)}`);
    const after = await h.demo.api('/api/status');
    if (after.snapshot_sequence !== before.snapshot_sequence || after.state !== 'paused') {
      throw new Error(`the moment changed: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
    }
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });
}

await h.run(main);
