// Drives the main page against the Fashion-MNIST demo; run by ui.sh.
// Each check waits with Playwright's own polling (never a fixed sleep) and the
// first failure stops the run: later checks build on the state it leaves.
import { spawn } from 'node:child_process';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const { values: args } = parseArgs({
  options: {
    demo: { type: 'string' },
    chromium: { type: 'string' },
    screenshots: { type: 'string' },
    pidfile: { type: 'string' },
  },
});

// Generous: the 2-core CI machine may be building while this runs.
const START_TIMEOUT_MS = 120_000;
const UI_TIMEOUT_MS = 15_000;
const RUN_TIMEOUT_MS = 90_000;
// Enough batches that a Run is still going when Stop is pressed.
const BATCHES = 300;

const logPath = join(args.screenshots, 'demo.log');
let demo = null;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function startDemo(port) {
  const log = createWriteStream(logPath, { flags: 'a' });
  const child = spawn(
    args.demo,
    ['--no-browser', '--port', String(port), '--epochs', '1', '--limit-batches', String(BATCHES)],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  writeFileSync(args.pidfile, String(child.pid));
  demo = child;
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const gone = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 200))]);
    if (gone) throw new Error(`the demo exited while starting (${JSON.stringify(gone)})`);
    try {
      const res = await fetch(`http://127.0.0.1:${port}/api/status`);
      if (res.ok && (await res.json()).state === 'paused') return;
    } catch {
      // Not listening yet.
    }
  }
  throw new Error(`the demo did not pause at its first batch within ${START_TIMEOUT_MS / 1000} s`);
}

function killDemo() {
  if (!demo || demo.exitCode !== null || demo.signalCode !== null) return Promise.resolve();
  const child = demo;
  return new Promise((resolve) => {
    child.once('exit', resolve);
    child.kill('SIGKILL');
  });
}

let page;
let browser;
let shot = 0;
const consoleErrors = [];

async function screenshot(name) {
  shot += 1;
  const file = join(args.screenshots, `${String(shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file });
}

const byTestId = (id) => page.getByTestId(id);

// Waits until the element's whole text matches.
async function expectText(id, expected, timeout = UI_TIMEOUT_MS) {
  const pattern = expected instanceof RegExp ? expected : new RegExp(`^\\s*${escapeRegExp(expected)}\\s*$`);
  try {
    await byTestId(id).filter({ hasText: pattern }).first().waitFor({ timeout });
  } catch {
    const actual = await byTestId(id).first().textContent({ timeout: 1000 }).catch(() => '(no such element)');
    throw new Error(`[data-testid=${id}] should read ${pattern}, but reads "${actual}"`);
  }
}

async function expectEnabled(id, enabled, timeout = UI_TIMEOUT_MS) {
  try {
    await page.waitForFunction(
      ([sel, want]) => {
        const el = document.querySelector(sel);
        return el != null && el.disabled === !want;
      },
      [`[data-testid="${id}"]`, enabled],
      { timeout },
    );
  } catch {
    throw new Error(`[data-testid=${id}] should be ${enabled ? 'enabled' : 'disabled'}`);
  }
}

// An <img> that loaded, or a strip's <canvas> with a picture drawn in it
// (some pixel is not transparent).
async function expectImageLoaded(id, timeout = UI_TIMEOUT_MS) {
  try {
    await page.waitForFunction(
      (sel) => {
        const el = document.querySelector(sel);
        if (el instanceof HTMLImageElement) return el.complete && el.naturalWidth > 0;
        if (!(el instanceof HTMLCanvasElement) || !el.dataset.drawn || el.width === 0) return false;
        const pixels = el.getContext('2d').getImageData(0, 0, el.width, el.height).data;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) return true;
        return false;
      },
      `[data-testid="${id}"]`,
      { timeout },
    );
  } catch {
    throw new Error(`image [data-testid=${id}] did not load`);
  }
}

// The bytes behind an <img> (a data: URL), as a base64 string to compare.
function imageBytes(id) {
  return page.evaluate(async (sel) => {
    const img = document.querySelector(sel);
    const buf = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
    let s = '';
    for (const b of buf) s += String.fromCharCode(b);
    return btoa(s);
  }, `[data-testid="${id}"]`);
}

function escapeRegExp(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// The schedule as the server reports it (phases, batches per phase).
let phases = [];
const batchesOf = (phase) => phases.find((p) => p.name === phase).batches;
const label = (phase, batch) => `epoch 0/1 | ${phase} batch ${batch}/${batchesOf(phase)}`;

async function main() {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  writeFileSync(logPath, '');
  await startDemo(port);

  browser = await chromium.launch({ executablePath: args.chromium, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));

  const architecture = await (await fetch(`${base}/api/architecture`)).json();
  architecture0 = architecture;
  const layerNames = architecture.layers.map((l) => l.name);
  phases = (await (await fetch(`${base}/api/status`)).json()).schedule.phases;
  const lastPhase = phases.at(-1).name;
  const lastBatch = batchesOf(lastPhase) - 1;

  await check('the page loads with no console errors', async () => {
    const html = await (await fetch(`${base}/`)).text();
    if (!html.includes('id="app"')) {
      throw new Error(
        'GET / is not the web UI: the demo was built without it embedded (configure with ' +
          'NANSENSE_EMBED_WEB=ON and web/node_modules installed) and NANSENSE_WEB_DIR is not set',
      );
    }
    await page.goto(base);
    await expectText('connection', 'live');
    await expectText('position-label', label('train', 0));
    await page.locator('body[data-rendered-sequence]').waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
    await expectImageLoaded('input-image');
    await expectEnabled('run', true);
    await expectEnabled('step', true);
    await expectEnabled('stop', false);
    // Time Travel follows the server (the demo trains under session.epochs(),
    // so epoch 0 is a target once it has started); either way it has a tooltip.
    const tt = (await (await fetch(`${base}/api/status`)).json()).time_travel;
    await expectEnabled('time-travel', tt?.available === true);
    const reason = await byTestId('time-travel-wrap').getAttribute('title');
    if (!reason) throw new Error('Time Travel has no tooltip saying what it does or why it is disabled');
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
    await screenshot('loaded');
  });

  await check('Step Batch advances the position label; the strips come over the push channel', async () => {
    const fetched = [];
    const onRequest = (r) => {
      if (r.url().includes('/api/render/layer')) fetched.push(r.url());
    };
    page.on('request', onRequest);
    try {
      await byTestId('step').click();
      await expectText('position-label', label('train', 1));
      await expectEnabled('step', true);
      const { snapshot_sequence: sequence } = await (await fetch(`${base}/api/status`)).json();
      await page.waitForFunction((s) => Number(document.body.dataset.renderedSequence) === s, sequence, {
        timeout: UI_TIMEOUT_MS,
      });
      const drawn = await page
        .locator('canvas[data-testid^="strip-"]')
        .evaluateAll((all) => all.filter((c) => c.getBoundingClientRect().top < innerHeight).map((c) => c.dataset.drawn));
      if (drawn.length === 0) throw new Error('no strip canvas on screen');
      if (drawn.some((d) => Number(d) !== sequence)) {
        throw new Error(`strips on screen show snapshots ${drawn.join(',')}, not ${sequence}`);
      }
      if (fetched.length) throw new Error(`the pause fetched ${fetched.length} strips over HTTP: ${fetched[0]}`);
    } finally {
      page.off('request', onRequest);
    }
    await screenshot('stepped');
  });

  await check('Step custom rejects a past target and says why', async () => {
    await byTestId('step-menu').click();
    await byTestId('step-custom').click();
    await byTestId('custom-dialog').waitFor({ timeout: UI_TIMEOUT_MS });
    await byTestId('custom-phase').selectOption('train');
    await byTestId('custom-batch').fill('0');
    await expectText('custom-error', 'Target must be after the current position epoch 0 | train batch 1');
    await expectEnabled('custom-submit', false);
    await screenshot('custom-step-rejected');
    await byTestId('custom-cancel').click();
    await byTestId('custom-dialog').waitFor({ state: 'detached', timeout: UI_TIMEOUT_MS });
  });

  await check('clicking a diagram node shows its card with loaded images', async () => {
    const shown = new Set(
      await page.locator('[data-testid^="card-"]').evaluateAll((cards) => cards.map((c) => c.dataset.layer)),
    );
    const target = [...layerNames].reverse().find((n) => !shown.has(n) && n !== architecture.inputs[0]);
    if (!target) throw new Error('every layer already has a card: nothing to click');
    await byTestId('graph-fit').click();
    await byTestId(`graph-node-${target}`).click();
    await byTestId(`card-${target}`).waitFor({ timeout: UI_TIMEOUT_MS });
    await expectImageLoaded(`strip-activation-${target}`);
    await expectImageLoaded(`strip-gradient-${target}`);
    // Hovering the node names the layer's kind in a tooltip and lights up
    // its card; hovering a card lights up its node.
    await byTestId(`graph-node-${target}`).hover();
    const kind = architecture.layers.find((l) => l.name === target).kind;
    await expectText('graph-tooltip', new RegExp(`kind\\s*${escapeRegExp(kind)}`));
    await page.locator(`[data-testid="card-${target}"].hovered`).waitFor({ timeout: UI_TIMEOUT_MS });
    await screenshot('node-card-shown');
    const other = await page.locator('[data-testid^="card-"]').first().getAttribute('data-layer');
    await byTestId(`card-${other}`).hover({ position: { x: 50, y: 12 } });
    await page.locator(`[data-testid="graph-node-${other}"].hovered`).waitFor({ timeout: UI_TIMEOUT_MS });
  });

  await check('changing the sample changes the input image', async () => {
    const before = await imageBytes('input-image');
    await byTestId('sample-input').fill('5');
    await page.locator('[data-testid="input-image"][data-sample="5"]').waitFor({ timeout: UI_TIMEOUT_MS });
    await expectImageLoaded('input-image');
    if ((await imageBytes('input-image')) === before) throw new Error('sample 5 shows the same picture as sample 0');
    // Out of range clamps to the batch's last sample.
    await byTestId('sample-input').fill('999');
    await page.locator('[data-testid="input-image"][data-sample="63"]').waitFor({ timeout: UI_TIMEOUT_MS });
    await screenshot('sample-changed');
  });

  await check('Run then Stop pauses again', async () => {
    await byTestId('run').click();
    await expectText('run-state', 'running');
    await expectEnabled('stop', true);
    await expectEnabled('run', false);
    await byTestId('stop').click();
    await expectText('run-state', 'paused', RUN_TIMEOUT_MS);
    await expectEnabled('run', true);
    const text = await byTestId('position-label').textContent();
    if (text === label(lastPhase, lastBatch)) throw new Error('the run reached its end before Stop: nothing was stopped');
    await screenshot('run-stopped');
  });

  await check('at the last batch, Run asks before stepping over it', async () => {
    await byTestId('step-menu').click();
    await byTestId('step-custom').click();
    await byTestId('custom-phase').selectOption(lastPhase);
    await byTestId('custom-batch').fill(String(lastBatch));
    await byTestId('custom-submit').click();
    await byTestId('custom-dialog').waitFor({ state: 'detached', timeout: UI_TIMEOUT_MS });
    await expectText('position-label', label(lastPhase, lastBatch), RUN_TIMEOUT_MS);
    await expectText('run-state', 'paused');
    await byTestId('run').click();
    await byTestId('confirm-last-batch').waitFor({ timeout: UI_TIMEOUT_MS });
    await screenshot('last-batch-confirm');
    await byTestId('confirm-step-over').click();
    await byTestId('finished-chip').waitFor({ timeout: RUN_TIMEOUT_MS });
    for (const id of ['run', 'step', 'stop', 'detach']) await expectEnabled(id, false);
    await screenshot('finished');
  });

  await check('no console errors while the server was up', async () => {
    if (consoleErrors.length) throw new Error(consoleErrors.join(' | '));
  });

  await check('a killed server shows disconnected', async () => {
    await killDemo();
    await expectText('connection', 'disconnected — reconnecting…');
    await expectEnabled('run', false);
    await screenshot('disconnected');
  });

  await check('a restarted server on the same port is reconnected by itself', async () => {
    await startDemo(port);
    await expectText('connection', 'live', START_TIMEOUT_MS);
    await expectText('position-label', label('train', 0));
    await byTestId('finished-chip').waitFor({ state: 'detached', timeout: UI_TIMEOUT_MS });
    // The new server's snapshot 1 replaces the old run's pictures.
    await page.locator('body[data-rendered-sequence="1"]').waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
    await expectEnabled('step', true);
    await screenshot('reconnected');
  });

  await check('a 200-layer network: laid out, every card listed, only visible strips load', async () => {
    await manyLayers(base);
  });

  await check('refusals and pushed states: toast, Step custom server message, lost banner, finished chip; pane widths persist', async () => {
    await pushedStates(base);
  });
}

// States a healthy demo does not reach on cue (a lost loop, a refused
// command) are pushed by a stand-in for /ws and stubbed POST replies; the
// JSON views and pictures still come from the demo.
async function pushedStates(base) {
  const status = await (await fetch(`${base}/api/status`)).json();
  const mocked = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  let push = null;
  await mocked.routeWebSocket(/\/ws$/, (ws) => {
    push = (s) => ws.send(JSON.stringify({ type: 'status', status: s }));
    push(status);
  });
  await mocked.route('**/api/step', (route) =>
    route.fulfill({ status: 409, json: { error: 'training has finished: nothing left to run' } }),
  );
  const refusal = 'target epoch 0 | train batch 5 is not after the current position epoch 0 | train batch 7';
  await mocked.route('**/api/run_until', (route) => route.fulfill({ status: 400, json: { error: refusal } }));
  const previous = page;
  page = mocked;
  try {
    await mocked.goto(base);
    await expectText('connection', 'live');
    await expectEnabled('step', true);
    await byTestId('step').click();
    await expectText('toast', /training has finished: nothing left to run/);

    await byTestId('step-menu').click();
    await byTestId('step-custom').click();
    await byTestId('custom-batch').fill('5');
    await byTestId('custom-submit').click();
    await expectText('custom-error', refusal);
    await screenshot('custom-step-server-refusal');
    await byTestId('custom-cancel').click();

    push({ ...status, state: 'lost', lost_reason: 'std::runtime_error: CUDA out of memory', hint: '' });
    await expectText('lost-banner', `Training loop exited — std::runtime_error: CUDA out of memory — at ${status.live_position.text}`);
    for (const id of ['run', 'step', 'stop', 'detach']) await expectEnabled(id, false);
    await screenshot('lost');

    push({ ...status, state: 'finished' });
    await byTestId('finished-chip').waitFor({ timeout: UI_TIMEOUT_MS });
    await byTestId('lost-banner').waitFor({ state: 'detached', timeout: UI_TIMEOUT_MS });

    // A resized pane keeps its width across a reload.
    const leftWidth = () => byTestId('graph').evaluate((el) => Math.round(el.getBoundingClientRect().width));
    const before = await leftWidth();
    await byTestId('resize-left').focus();
    for (let i = 0; i < 3; i++) await mocked.keyboard.press('ArrowRight');
    const widened = await leftWidth();
    if (widened <= before) throw new Error(`the architecture pane did not widen (${before} -> ${widened} px)`);
    await mocked.reload();
    await byTestId('graph').waitFor({ timeout: UI_TIMEOUT_MS });
    await mocked.waitForFunction(
      (w) => Math.round(document.querySelector('[data-testid="graph"]').getBoundingClientRect().width) === w,
      widened,
      { timeout: UI_TIMEOUT_MS },
    );
  } finally {
    page = previous;
    await mocked.close();
  }
}

// A synthetic 200-layer network with skip connections, served to a fresh
// page by intercepting the JSON views; every strip gets one real picture
// from the demo so the images are genuine PNGs of a known size.
async function manyLayers(base) {
  const COUNT = 200;
  const realLayer = architecture0.layers.find((l) => l.output_shape.length === 4 && l.role !== 'input');
  const real = await fetch(`${base}/api/render/layer?layer=${encodeURIComponent(realLayer.name)}&kind=activation`);
  const png = Buffer.from(await real.arrayBuffer());
  const info = JSON.parse(real.headers.get('X-Nansense-Render'));
  const shape = realLayer.output_shape;
  const names = Array.from({ length: COUNT }, (_, i) => (i === 0 ? 'x' : `stage${Math.floor(i / 10)}.block${i % 10}.conv`));
  const layers = names.map((name, i) => ({
    name,
    role: i === 0 ? 'input' : i % 3 === 0 ? 'op' : 'module',
    kind: i === 0 ? 'input' : i % 3 === 0 ? 'add' : 'Conv2d',
    module: '',
    ops: [],
    output_shape: shape,
    dtype: 'Float',
    parameters: [],
  }));
  const edges = [];
  for (let i = 1; i < COUNT; i++) {
    edges.push({ from: names[i - 1], to: names[i] });
    if (i % 3 === 0 && i >= 3) edges.push({ from: names[i - 3], to: names[i] });
  }
  const summary = { shape, dtype: 'Float', numel: shape.reduce((a, b) => a * b, 1), min: -1, max: 1, mean: 0, non_finite: 0 };

  const big = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  big.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  let renders = 0;
  await big.route('**/api/architecture', async (route) => {
    const res = await route.fetch();
    await route.fulfill({ response: res, json: { ...(await res.json()), layers, edges, inputs: ['x'] } });
  });
  await big.route('**/api/snapshot', async (route) => {
    const res = await route.fetch();
    const snap = await res.json();
    const fake = layers.map((l, i) => ({ name: l.name, kind: l.kind, activation: summary, gradient: i === 0 ? null : summary }));
    await route.fulfill({ response: res, json: { ...snap, layers: fake } });
  });
  await big.route('**/api/render/layer?*', async (route) => {
    renders += 1;
    const q = new URL(route.request().url()).searchParams;
    const header = JSON.stringify({ ...info, layer: q.get('layer'), kind: q.get('kind'), sample: Number(q.get('sample')) });
    await route.fulfill({ status: 200, body: png, headers: { 'Content-Type': 'image/png', 'X-Nansense-Render': header } });
  });

  const previous = page;
  page = big;
  try {
    await big.goto(base);
    await byTestId(`graph-node-${names[COUNT - 1]}`).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
    const nodes = await big.locator('[data-testid^="graph-node-"]').count();
    if (nodes !== COUNT) throw new Error(`the diagram has ${nodes} nodes, expected ${COUNT}`);
    await byTestId('layer-menu').click();
    await byTestId('show-all').click();
    await big.keyboard.press('Escape');
    await byTestId(`card-${names[COUNT - 1]}`).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
    const cards = await big.locator('[data-testid^="card-"]').count();
    if (cards !== COUNT) throw new Error(`${cards} cards after Show all, expected ${COUNT}`);
    await big.locator('body[data-rendered-sequence]').waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
    // Lazy loading: a screenful (plus the preload margin), not 2 x 200 strips.
    if (renders > 60) throw new Error(`${renders} strips were rendered for one screen of cards`);
    await byTestId('cards').evaluate((el) => el.scrollTo(0, el.scrollHeight));
    await expectImageLoaded(`strip-activation-${names[COUNT - 1]}`);
    await byTestId('graph-fit').click();
    await screenshot('200-layers');
    if (errors.length) throw new Error(`console errors: ${errors.join(' | ')}`);
  } finally {
    page = previous;
    await big.close();
  }
}

let architecture0;
let failed = false;
let passed = 0;

async function check(name, body) {
  try {
    await body();
    passed += 1;
    console.log(`PASS ui: ${name}`);
  } catch (e) {
    failed = true;
    console.log(`FAIL ui: ${name}: ${e.message.split('\n')[0]}`);
    if (page) await page.screenshot({ path: join(args.screenshots, 'failure.png') }).catch(() => {});
    throw e;
  }
}

try {
  await main();
} catch (e) {
  if (!failed) console.log(`FAIL ui: ${e.message}`);
  failed = true;
  try {
    const log = readFileSync(logPath, 'utf8').split('\n').slice(-30).join('\n');
    console.log(`--- demo output (last lines) ---\n${log}`);
  } catch {
    // No log to show.
  }
} finally {
  await browser?.close().catch(() => {});
  await killDemo();
}
console.log(`ui: ${passed} checks passed${failed ? ', 1 failed' : ''}; screenshots in ${args.screenshots}`);
process.exit(failed ? 1 : 0);
