// Runs the demo's --nan loss to its trip and reads what the page says about
// it; run by nan.sh. Every wait is Playwright's own polling (no fixed sleeps);
// the first failure stops the run, since later checks build on its state.
import { Harness, collectConsoleErrors, escapeRegExp } from './harness.mjs';

const h = new Harness('nan-ui', { options: { capsules: { type: 'string' } } });
const { args } = h;
const { byTestId, expectText, gone, screenshot, check } = h;

const UI_TIMEOUT_MS = h.uiTimeoutMs;
const RUN_TIMEOUT_MS = 90_000;

let base = '';
const api = (path) => h.demo.api(path);

// The percentages of the details table, as the dialog should write them.
const percent = (f) => (!(f > 0) ? '—' : f < 0.001 ? '<0.1%' : `${(f * 100).toFixed(1)}%`);

async function main() {
  await h.startDemo([
    '--epochs', '1', '--limit-batches', '40', '--nan', '--batch-size', '8', '--capsule-dir', args.capsules,
  ]);
  base = h.demo.base;

  await h.launch();
  const page = (h.page = await h.newPage());
  const consoleErrors = collectConsoleErrors(page, {
    // The browser logs the refusal the settings check provokes on purpose.
    ignore: (m) => m.location().url.endsWith('/api/debug/settings') && m.text().includes('status of 400'),
  });
  const architecture = await api('/api/architecture');
  // The layers with a node: shape ops are folded into the edges by default,
  // and a producer in one is marked where the values entered instead.
  const layerNames = new Set(architecture.layers.filter((l) => !l.shape_op).map((l) => l.name));

  let report;
  await check('the trip the demo hit as it started: paused, and the banner names reasons, position and producer', async () => {
    const html = await (await fetch(`${base}/`)).text();
    if (!html.includes('id="app"')) throw new Error('GET / is not the web UI (set NANSENSE_WEB_DIR=web/dist or embed it)');
    await page.goto(base);
    await expectText('connection', 'live');
    await expectText('run-state', 'paused');
    // At batch size 8 every batch lacks one of the 10 classes: the first
    // batch, captured and traced for the page, trips.
    const status = await api('/api/status');
    const e = status.debug?.error;
    if (!e) throw new Error(`the demo paused at ${status.live_position?.text} with no numerical error`);
    if (e.position.text !== status.live_position.text) throw new Error(`paused at ${status.live_position.text}, the trip was at ${e.position.text}`);
    if (!e.reasons.includes('nan')) throw new Error(`reasons ${e.reasons} lack nan`);
    report = await api('/api/debug');
    const p = report.error.root_cause?.producer;
    if (report.error.root_cause?.status !== 'found' || !p) throw new Error(`no producer: ${JSON.stringify(report.error.root_cause).slice(0, 200)}`);
    const where = p.layer ? ` of ${p.layer}` : ", outside the model's layers (the loss?)";
    await expectText(
      'debug-banner-text',
      `Numerical issue detected — ${report.error.reason_labels.join(', ')} — at ${e.position.text} — first produced by ${p.op} in the ${p.pass} pass${where}`,
    );
    await screenshot('tripped');
  });

  await check("the producer's node is marked in the diagram and its card is open and in view", async () => {
    const p = report.error.root_cause.producer;
    const marked = page.locator('[data-testid^="graph-node-"][data-debug="producer"], [data-testid^="graph-node-"][data-debug="entry"]');
    await marked.first().waitFor({ timeout: UI_TIMEOUT_MS });
    if ((await marked.count()) !== 1) throw new Error(`${await marked.count()} nodes are marked as the source`);
    const layer = await marked.getAttribute('data-layer');
    const mark = await marked.getAttribute('data-debug');
    if (p.layer && layerNames.has(p.layer)) {
      if (layer !== p.layer || mark !== 'producer') throw new Error(`marked ${layer} (${mark}), the producer ran in ${p.layer}`);
    } else {
      // Outside the model (the demo's loss): the layer it entered by.
      const rows = report.error.layers.map((r) => r.layer);
      if (mark !== 'entry' || !rows.includes(layer)) throw new Error(`marked ${layer} (${mark}), not an affected layer`);
    }
    const faint = await page.locator('[data-testid^="graph-node-"][data-debug="propagator"]').count();
    if (faint === 0) throw new Error('no layer is marked as having passed the values on');
    const card = byTestId(`card-${layer}`);
    await card.waitFor({ timeout: UI_TIMEOUT_MS });
    await expectText(`debug-badge-${layer}`, mark === 'producer' ? 'produced here' : 'entered here');
    await page.waitForFunction(
      (name) => {
        const c = document.querySelector(`[data-testid="card-${CSS.escape(name)}"]`);
        const s = document.querySelector('[data-testid="cards"]');
        if (!c || !s) return false;
        const a = c.getBoundingClientRect();
        const b = s.getBoundingClientRect();
        return a.top >= b.top - 1 && a.top < b.bottom;
      },
      layer,
      { timeout: UI_TIMEOUT_MS },
    );
    await screenshot('producer-marked');
  });

  await check('a held update: Skip / Apply in the banner and the dialog, apply by default, the choice reaches the server', async () => {
    const e = (await api('/api/status')).debug.error;
    if (e.update !== 'held') {
      // Found after the optimizer step: there is nothing to choose.
      if (await byTestId('banner-update').count()) throw new Error(`the banner offers a choice for an update that is ${e.update}`);
      return;
    }
    const choice = (id, want) => page.locator(`[data-testid="${id}"][data-choice="${want}"]`).waitFor({ timeout: UI_TIMEOUT_MS });
    await choice('banner-update', 'apply');
    await expectText('banner-update', /Skip clears every parameter's gradient before the loop resumes/);
    await byTestId('banner-update-skip').click();
    await choice('banner-update', 'skip');
    if ((await api('/api/debug')).skip_update !== true) throw new Error('Skip this update did not reach the server');
    await byTestId('debug-banner-details').click();
    await choice('debug-update', 'skip');
    await screenshot('update-held');
    await byTestId('debug-update-apply').click();
    await choice('debug-update', 'apply');
    if ((await api('/api/debug')).skip_update !== false) throw new Error('Apply it did not reach the server');
    await byTestId('debug-close').click();
    await gone('debug-dialog');
  });

  await check('a later hit merges into the standing error and does not undo what the user chose', async () => {
    const layer = await page.locator('[data-testid^="graph-node-"][data-debug="entry"], [data-testid^="graph-node-"][data-debug="producer"]').first().getAttribute('data-layer');
    await byTestId(`hide-${layer}`).click();
    await gone(`card-${layer}`);
    // The next batch lacks a class too: it trips, and merges (first
    // position kept) rather than raising a new error.
    await byTestId('step').click();
    await expectText('debug-banner-text', /\(2 checked batches tripped\)/, RUN_TIMEOUT_MS);
    await expectText('run-state', 'paused');
    await expectText('debug-banner-text', new RegExp(`at ${escapeRegExp(report.error.position.text)} — `));
    if (await byTestId(`card-${layer}`).count()) throw new Error(`the hidden card of ${layer} was opened again by a merged hit`);
    report = await api('/api/debug');
  });

  await check('Details: reasons, producer vs propagators, band box, per-layer percentages, capsule', async () => {
    await byTestId('debug-banner-details').click();
    await byTestId('debug-dialog').waitFor({ timeout: UI_TIMEOUT_MS });
    const e = report.error;
    await expectText('debug-reasons', new RegExp(escapeRegExp(`Reasons: ${e.reason_labels.join(', ')} · ${e.position.text}`)));
    await expectText('debug-producer', new RegExp(escapeRegExp(e.root_cause.producer.op)));
    if (e.root_cause.propagator_count > 0) {
      await expectText('debug-propagators', new RegExp(`${e.root_cause.propagator_count} later ops? only passed non-finite values on`));
    }
    if (e.checks_used.includes('under_over')) await expectText('debug-bands', /float32: subnormal when 0 < \|grad\| < 1\.18e-38/);
    const headers = await byTestId('debug-table').locator('thead th').allTextContents();
    const want = ['Layer', ...(e.checks_used.includes('nan_inf') ? ['NaN', '±Inf'] : []), ...(e.checks_used.includes('under_over') ? ['subnormal', 'overflow'] : [])];
    if (headers.slice(0, want.length).join('|') !== want.join('|')) throw new Error(`table headers ${headers} should start ${want}`);
    // Fresh numbers: later hits merge while the dialog was opened.
    const now = (await api('/api/debug')).error;
    const rows = await byTestId('debug-table').locator('tbody tr').count();
    if (rows !== now.layers.length) throw new Error(`${rows} table rows for ${now.layers.length} reported layers`);
    for (const r of now.layers) {
      const cells = await byTestId(`debug-row-${r.layer}`).locator('td').allTextContents();
      const expected = [r.layer, percent(r.nan), percent(r.inf), percent(r.underflow), percent(r.overflow)].slice(0, want.length);
      if (cells.slice(0, want.length).join('|') !== expected.join('|')) {
        throw new Error(`row ${r.layer} reads ${cells.slice(0, want.length)}, expected ${expected}`);
      }
    }
    if (!now.capsule) throw new Error('the report names no capsule');
    await expectText('debug-capsule-path', now.capsule);
    await expectText('debug-capsule', /--replay/);
    await screenshot('details');
    await byTestId('debug-close').click();
    await gone('debug-dialog');
  });

  await check('Dismiss keeps checking: Run pauses at the next trip, with its own banner', async () => {
    await byTestId('debug-banner-details').click();
    await byTestId('debug-clear').click();
    await gone('debug-dialog');
    await gone('debug-banner');
    await byTestId('run').click();
    // The run pauses with the banner; the traced re-run of the untraced
    // batch then names where the values came from.
    await expectText('debug-banner-text', /first (produced|seen) by/, RUN_TIMEOUT_MS);
    await expectText('run-state', 'paused');
    const status = await api('/api/status');
    const e = status.debug.error;
    if (status.state !== 'paused' || e.position.text !== status.live_position.text) {
      throw new Error(`${status.state} at ${status.live_position.text}, not paused at the trip ${e.position.text}`);
    }
    if (e.position.text === report.error.position.text) throw new Error('Run did not get past the dismissed trip');
    await expectText('debug-banner-text', new RegExp(`^\\s*Numerical issue detected — ${escapeRegExp(e.reason_labels.join(', '))} — at ${escapeRegExp(e.position.text)} — `));
    // Its source is marked, and its card brought into view, once more.
    const marked = page.locator('[data-testid^="graph-node-"][data-debug="producer"], [data-testid^="graph-node-"][data-debug="entry"]');
    await marked.first().waitFor({ timeout: UI_TIMEOUT_MS });
    await byTestId(`card-${await marked.first().getAttribute('data-layer')}`).waitFor({ timeout: UI_TIMEOUT_MS });
    await screenshot('next-trip');
  });

  await check('Silence clears the banner and turns off the check that tripped', async () => {
    await byTestId('debug-banner-silence').click();
    await gone('debug-banner');
    // The banner goes with the pushed status that followed the silence.
    const r = await api('/api/debug');
    if (r.error !== null || r.settings.check_nan_inf !== false) throw new Error(`after Silence: ${JSON.stringify(r).slice(0, 300)}`);
    await screenshot('silenced');
  });

  await check('the gear dialog refuses a bad threshold with the server message, then saves a partial update', async () => {
    await byTestId('settings-gear').click();
    await byTestId('debug-settings-dialog').waitFor({ timeout: UI_TIMEOUT_MS });
    await byTestId('settings-threshold').waitFor({ timeout: UI_TIMEOUT_MS });
    if (await byTestId('settings-nan-inf').isChecked()) throw new Error('NaN / ±Inf shows as on after Silence');
    await byTestId('settings-threshold').fill('2');
    await byTestId('settings-save').click();
    await expectText('settings-error', /argument "threshold_fraction" must be greater than 0 and at most 1, got 2/);
    await screenshot('settings-refused');
    if ((await api('/api/debug')).settings.threshold_fraction !== 0.1) throw new Error('the refused threshold was applied');
    await byTestId('settings-threshold').fill('0.25');
    await byTestId('settings-interval').fill('3');
    await byTestId('settings-nan-inf').check();
    await byTestId('settings-save').click();
    // It closes once the server accepted the update.
    await gone('debug-settings-dialog');
    const { settings } = await api('/api/debug');
    if (settings.threshold_fraction !== 0.25 || settings.interval_batches !== 3 || settings.check_nan_inf !== true) {
      throw new Error(`saved settings read ${JSON.stringify(settings)}`);
    }
  });

  await check('an under/overflow error (pushed by a stand-in): band lines per dtype, the worst layer marked, "<0.1%"', async () => {
    await bandsError();
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(consoleErrors.join(' | '));
  });
}

// float16 and bfloat16 gradients are not on the demo's CPU path: a stand-in
// for /ws pushes the status and GET /api/debug answers the report; the
// architecture, snapshot and pictures still come from the demo.
async function bandsError() {
  const status = await api('/api/status');
  const position = status.live_position;
  const rows = [
    { layer: 'features.0', nan: 0, inf: 0, underflow: 0.0004, overflow: 0, dtype: 'float16', sources: [] },
    { layer: 'classifier.1', nan: 0, inf: 0, underflow: 0.35, overflow: 0, dtype: 'bfloat16', sources: [] },
    { layer: 'classifier.4', nan: 0, inf: 0, underflow: 0, overflow: 0.12, dtype: 'float16', sources: [] },
  ];
  const error = {
    position, reasons: ['underflow', 'overflow'], reason_labels: ['subnormal', 'overflow'], checks_used: ['under_over'],
    layers: rows, root_cause: null, capsule: null, hits: 1, update: null,
    bands: [
      { dtype: 'float16', tiny: 6.103515625e-5, overflow: 65504 / 16 },
      { dtype: 'bfloat16', tiny: 1.1754943508222875e-38, overflow: 3.3895313892515355e38 / 16 },
    ],
    text: '',
  };
  const summary = {
    reasons: error.reasons, reason_labels: error.reason_labels, position, text: '', layers: rows.map((r) => r.layer),
    root_cause_status: null, producer: null, capsule: null, hits: 1, update: null, skip_update: false,
  };
  const mocked = await h.newPage();
  await mocked.routeWebSocket(/\/ws$/, (ws) => {
    ws.send(JSON.stringify({ type: 'status', status: { ...status, debug: { enabled: true, checks: ['under_over'], error: summary } } }));
  });
  await mocked.route('**/api/debug', (route) => route.fulfill({ json: { settings: {}, error, checked_batches: 1, skip_update: false } }));
  try {
    await h.withPage(mocked, async () => {
      await mocked.goto(base);
      await expectText('debug-banner-text', `Numerical issue detected — subnormal, overflow — at ${position.text}`);
      await mocked.locator('[data-testid="graph-node-classifier.1"][data-debug="worst"]').waitFor({ timeout: UI_TIMEOUT_MS });
      await expectText('debug-badge-classifier.1', 'worst band share');
      await byTestId('debug-banner-details').click();
      await expectText('debug-bands', /float16: subnormal when 0 < \|grad\| < 6\.10e-05; overflow when \|grad\| ≥ 4\.09e\+03/);
      await expectText('debug-bands', /bfloat16: subnormal when 0 < \|grad\| < 1\.18e-38; overflow when \|grad\| ≥ 2\.12e\+37/);
      await expectText('debug-bands', /scale the loss/);
      const headers = await byTestId('debug-table').locator('thead th').allTextContents();
      if (headers.slice(0, 3).join('|') !== 'Layer|subnormal|overflow') throw new Error(`headers ${headers}: only the check that ran has columns`);
      const cells = async (layer) => (await byTestId(`debug-row-${layer}`).locator('td').allTextContents()).slice(0, 3).join('|');
      for (const [layer, want] of [['features.0', 'features.0|<0.1%|—'], ['classifier.1', 'classifier.1|35.0%|—'], ['classifier.4', 'classifier.4|—|12.0%']]) {
        if ((await cells(layer)) !== want) throw new Error(`row ${layer} reads ${await cells(layer)}, expected ${want}`);
      }
      if (await byTestId('debug-root-cause').count()) throw new Error('an under/overflow error has no root cause to show');
      await screenshot('bands');
    });
  } finally {
    await mocked.close();
  }
}

await h.run(main);
