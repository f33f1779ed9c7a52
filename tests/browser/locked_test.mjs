// A locked, parked playground session (playground_demo serving a frozen
// moment); run by locked.sh. Each browser context is a visitor of its own
// (the server's cookie): its probe is shown to it alone. Every wait is Playwright's polling or a deadline.
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

  await check('the layers are drawn; no watch eye; the probe controls are the visitor’s own', async () => {
    await byTestId(`card-${CONV}`).waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('input-image').waitFor({ timeout: h.uiTimeoutMs });
    if (await byTestId(`watch-${CONV}`).count()) throw new Error('a watch eye is shown');
    await byTestId('probe').waitFor({ timeout: h.uiTimeoutMs });
    await expectText('probe-own', /only you see it/);
    await screenshot('main');
  });

  await check('one visitor’s probe shows in its page only, never in another browser’s', async () => {
    // Another browser (its own context: its own visitor cookie).
    const other = await h.newPage({ width: 1440, height: 1000 });
    const otherErrors = collectConsoleErrors(other);
    await other.goto(base);
    await other.getByTestId(`card-${CONV}`).waitFor({ timeout: h.uiTimeoutMs });
    const before = await h.demo.api('/api/status');
    await byTestId('probe-mode-eval').click();
    await byTestId(`probe-badge-${CONV}`).waitFor({ timeout: h.uiTimeoutMs });
    await expectText('probe-caption', /eval mode/);
    // The other page's own status comes over the same push channel: it
    // reports no probe, and its cards carry no probe badge.
    const otherStatus = await other.evaluate(async () => (await fetch('/api/status')).json());
    if (otherStatus.probe.active) throw new Error(`the other visitor sees a probe: ${JSON.stringify(otherStatus.probe)}`);
    if (otherStatus.snapshot_sequence !== before.snapshot_sequence) throw new Error('the other visitor’s snapshot changed');
    if (await other.getByTestId(`probe-badge-${CONV}`).count()) throw new Error('the other page shows a probe badge');
    const segment = other.getByTestId('probe-mode-unchanged');
    if ((await segment.getAttribute('aria-pressed')) !== 'true') throw new Error('the other page’s mode is not unchanged');
    await screenshot('probe-own');
    await byTestId('probe-mode-unchanged').click();
    await h.gone(`probe-badge-${CONV}`);
    if (otherErrors.length) throw new Error(`console errors on the other page: ${otherErrors.join(' | ')}`);
    await other.close();
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
