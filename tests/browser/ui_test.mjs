// Drives the main page against the Fashion-MNIST demo; run by ui.sh.
// Each check waits with Playwright's own polling (never a fixed sleep) and the
// first failure stops the run: later checks build on the state it leaves.
import { Harness, START_TIMEOUT_MS, collectConsoleErrors, escapeRegExp } from './harness.mjs';
import { fakeManyLayers, fakeNaN, showAllLayers } from './many_layers.mjs';

const h = new Harness('ui');
const { byTestId, expectText, expectTextWhileProgressing, expectEnabled, expectImageLoaded, screenshot, check } = h;

const RUN_TIMEOUT_MS = 90_000;
const UI_TIMEOUT_MS = h.uiTimeoutMs;
// Enough batches that a Run is still going when Pause is pressed.
const DEMO_ARGS = ['--epochs', '1', '--limit-batches', '300'];

// The bytes behind an <img> (a data: URL), as a base64 string to compare.
function imageBytes(id) {
  return h.page.evaluate(async (sel) => {
    const img = document.querySelector(sel);
    const buf = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
    let s = '';
    for (const b of buf) s += String.fromCharCode(b);
    return btoa(s);
  }, `[data-testid="${id}"]`);
}

// The schedule as the server reports it (phases, batches per phase).
let phases = [];
const batchesOf = (phase) => phases.find((p) => p.name === phase).batches;
const label = (phase, batch) => `epoch 0/1 | ${phase} batch ${batch}/${batchesOf(phase)}`;

async function main() {
  await h.startDemo(DEMO_ARGS);
  const base = h.demo.base;

  await h.launch();
  const page = (h.page = await h.newPage());
  const consoleErrors = collectConsoleErrors(page);

  const architecture = await (await fetch(`${base}/api/architecture`)).json();
  // Shape ops are folded out of the diagram and the cards by default.
  const layerNames = architecture.layers.filter((l) => !l.shape_op).map((l) => l.name);
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
    await expectEnabled('pause', false);
    // Time Travel follows the server (the demo trains under session.epochs(),
    // so epoch 0 is a target once it has started); either way it has a tooltip.
    const tt = (await (await fetch(`${base}/api/status`)).json()).time_travel;
    await expectEnabled('time-travel', tt?.available === true);
    const reason = await byTestId('time-travel-wrap').getAttribute('title');
    if (!reason) throw new Error('Time Travel has no tooltip saying what it does or why it is disabled');
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
    await screenshot('loaded');
  });

  await check('in a narrow window the top bar items never overlap; the position gives way, whole in its tooltip', async () => {
    for (const width of [1180, 1024, 900]) {
      const narrow = await h.newPage({ width, height: 700 });
      try {
        await narrow.goto(base);
        await narrow.getByTestId('connection').filter({ hasText: 'live' }).waitFor({ timeout: UI_TIMEOUT_MS });
        await narrow.getByTestId('position-label').filter({ hasText: /epoch/ }).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
        const bar = await narrow.evaluate(() => {
          const header = document.querySelector('header.topbar');
          const boxes = [...header.querySelectorAll(':scope > *, .where > *')]
            .filter((e) => !e.classList.contains('where') && !e.classList.contains('toolbar-spacer'))
            .map((e) => ({ e, r: e.getBoundingClientRect() }))
            .filter(({ r }) => r.width > 0);
          const overlaps = [];
          for (let i = 0; i < boxes.length; ++i) {
            for (let j = i + 1; j < boxes.length; ++j) {
              const a = boxes[i].r, b = boxes[j].r;
              if (a.left < b.right - 0.5 && b.left < a.right - 0.5) overlaps.push(`${boxes[i].e.className} / ${boxes[j].e.className}`);
            }
          }
          const label = document.querySelector('[data-testid="position-label"]');
          return { overlaps, scroll: header.scrollWidth, width: header.clientWidth, title: label.title, text: label.textContent };
        });
        if (bar.overlaps.length) throw new Error(`at ${width} px the top bar overlaps: ${bar.overlaps.join('; ')}`);
        if (bar.scroll > bar.width) throw new Error(`at ${width} px the top bar is ${bar.scroll} px wide`);
        if (bar.title !== bar.text) throw new Error(`the position's tooltip "${bar.title}" is not its text "${bar.text}"`);
      } finally {
        await narrow.close();
      }
    }
  });

  await check('Step Batch advances the position label; the strips come over the push channel', async () => {
    const fetched = [];
    const onRequest = (r) => {
      if (r.url().includes('/api/render/strip')) fetched.push(r.url());
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
    // Sample 63 stays chosen for the steps below, which cross phases' smaller
    // last batches: the page must clamp it there without asking for a sample
    // the batch does not have ("no console errors" below).
  });

  await check('Run then Pause pauses again', async () => {
    await byTestId('run').click();
    await expectText('run-state', 'running');
    await expectEnabled('pause', true);
    await expectEnabled('run', false);
    await byTestId('pause').click();
    await expectText('run-state', 'paused', RUN_TIMEOUT_MS);
    await expectEnabled('run', true);
    const text = await byTestId('position-label').textContent();
    if (text === label(lastPhase, lastBatch)) throw new Error('the run reached its end before Pause: nothing was paused');
    await screenshot('run-stopped');
  });

  await check('at the last batch, Run asks before stepping over it', async () => {
    await byTestId('step-menu').click();
    await byTestId('step-custom').click();
    await byTestId('custom-phase').selectOption(lastPhase);
    await byTestId('custom-batch').fill(String(lastBatch));
    await byTestId('custom-submit').click();
    await byTestId('custom-dialog').waitFor({ state: 'detached', timeout: UI_TIMEOUT_MS });
    await expectTextWhileProgressing('position-label', label(lastPhase, lastBatch));
    await expectText('run-state', 'paused');
    await byTestId('run').click();
    await byTestId('confirm-last-batch').waitFor({ timeout: UI_TIMEOUT_MS });
    await screenshot('last-batch-confirm');
    await byTestId('confirm-step-over').click();
    await byTestId('finished-chip').waitFor({ timeout: RUN_TIMEOUT_MS });
    for (const id of ['run', 'step', 'pause', 'detach']) await expectEnabled(id, false);
    await screenshot('finished');
  });

  await check('no console errors while the server was up', async () => {
    if (consoleErrors.length) throw new Error(consoleErrors.join(' | '));
  });

  await check('a killed server shows disconnected', async () => {
    await h.demo.kill();
    await expectText('connection', 'disconnected — reconnecting…');
    await expectEnabled('run', false);
    await screenshot('disconnected');
  });

  await check('a restarted server on the same port is reconnected by itself', async () => {
    await h.demo.start(h.port, DEMO_ARGS);
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

  await check('shape ops fold into the edges, a NaN made in one is shown where it entered, the switch unfolds them and is remembered; "#" names work', async () => {
    await foldedShapeOps(base);
  });

  await check("a distributed run's held update: Skip is off and says why, Apply stays", async () => {
    await skipRefused(base);
  });

  await check('refusals and pushed states: toast, Step custom server message, lost banner, finished chip; pane widths persist', async () => {
    await pushedStates(base);
  });

  await check('a snapshot over its budget: the picker stops at the kept samples and a note says what was left out', async () => {
    await h.demo.kill();
    await h.demo.start(h.port, [...DEMO_ARGS, '--snapshot-budget-mib', '4']);
    const snapshot = await (await fetch(`${base}/api/snapshot`)).json();
    if (!snapshot.budget.trimmed || snapshot.samples_kept >= snapshot.batch_size) {
      throw new Error(`a 4 MiB budget kept every sample: ${JSON.stringify(snapshot.budget)}`);
    }
    await page.reload();
    const note = new RegExp(`showing ${snapshot.samples_kept} of ${snapshot.batch_size} samples`);
    await expectText('budget-note', note, START_TIMEOUT_MS);
    await byTestId('sample-input').fill('999');
    const last = snapshot.samples_kept - 1;
    await page.locator(`[data-testid="input-image"][data-sample="${last}"]`).waitFor({ timeout: UI_TIMEOUT_MS });
    await expectImageLoaded('input-image');
    await screenshot('snapshot-budget');
  });
}

// States a healthy demo does not reach on cue (a lost loop, a refused
// command) are pushed by a stand-in for /ws and stubbed POST replies; the
// JSON views and pictures still come from the demo.
async function pushedStates(base) {
  const status = await (await fetch(`${base}/api/status`)).json();
  const mocked = await h.newPage();
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
  try {
    await h.withPage(mocked, async () => {
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
      for (const id of ['run', 'step', 'pause', 'detach']) await expectEnabled(id, false);
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
    });
  } finally {
    await mocked.close();
  }
}

// A synthetic 200-layer network (many_layers.mjs) on a fresh page.
async function manyLayers(base) {
  const COUNT = 200;
  const big = await h.newPage();
  const errors = collectConsoleErrors(big, { uncaught: false });
  try {
    await h.withPage(big, async () => {
      const { names, renders } = await fakeManyLayers(big, base, COUNT);
      await big.goto(base);
      // Opens in its module groups (groups_test.mjs checks those); every layer once all are open.
      await byTestId('graph-expand-all').click();
      await byTestId(`graph-node-${names[COUNT - 1]}`).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
      const nodes = await big.locator('[data-testid^="graph-node-"]').count();
      if (nodes !== COUNT) throw new Error(`the diagram has ${nodes} nodes, expected ${COUNT}`);
      await showAllLayers(big, names, UI_TIMEOUT_MS);
      const cards = await big.locator('[data-testid^="card-"]').count();
      if (cards !== COUNT) throw new Error(`${cards} cards after Show all, expected ${COUNT}`);
      await big.locator('body[data-rendered-sequence]').waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
      // Lazy loading: a screenful (plus the preload margin), not 2 x 200 strips.
      if (renders() > 60) throw new Error(`${renders()} strips were rendered for one screen of cards`);
      await byTestId('cards').evaluate((el) => el.scrollTo(0, el.scrollHeight));
      await expectImageLoaded(`strip-activation-${names[COUNT - 1]}`);
      await byTestId('graph-fit').click();
      await screenshot('200-layers');
      if (errors.length) throw new Error(`console errors: ${errors.join(' | ')}`);
    });
  } finally {
    await big.close();
  }
}

// A synthetic network with shape ops and a module called twice ("...#2"),
// and a stand-in push whose NaN was produced in a folded shape op.
async function skipRefused(base) {
  const page = await h.newPage();
  try {
    await h.withPage(page, async () => {
      const { names } = await fakeManyLayers(page, base, 8);
      const why = 'this is a distributed run: every rank steps with the same averaged gradients';
      await fakeNaN(page, h.demo, names[2], [], 'aten::div', { update: 'held', skipRefused: why });
      await page.goto(base);
      for (const id of ['banner-update', 'debug-update']) {
        if (id === 'debug-update') await byTestId('debug-banner-details').click();
        await byTestId(id).waitFor({ timeout: UI_TIMEOUT_MS });
        await expectEnabled(`${id}-skip`, false);
        await expectEnabled(`${id}-apply`, true);
        const title = await byTestId(`${id}-skip`).getAttribute('title');
        if (title !== why) throw new Error(`${id}'s Skip says "${title}", not why it is off`);
        await expectText(`${id}-note`, /^Skipping is off: this is a distributed run/);
      }
      await screenshot('skip-refused');
    });
  } finally {
    await page.close();
  }
}

async function foldedShapeOps(base) {
  const COUNT = 30;
  const page = await h.newPage();
  const errors = collectConsoleErrors(page, { uncaught: false });
  try {
    await h.withPage(page, async () => {
      const { names, layers, edges } = await fakeManyLayers(page, base, COUNT, { shapeOps: true });
      const folded = layers.filter((l) => l.shape_op).map((l) => l.name);
      const kept = layers.filter((l) => !l.shape_op).map((l) => l.name);
      const twice = names.find((n) => n.includes('#'));
      // The folded graph, worked out here the slow way: each kept layer to
      // every kept layer it reaches through shape ops only.
      const hidden = new Set(folded);
      const reach = (n) => edges.filter((e) => e.from === n).flatMap((e) => (hidden.has(e.to) ? reach(e.to) : [e.to]));
      const foldedEdges = new Set(kept.flatMap((n) => reach(n).map((t) => `${n}->${t}`)));

      // names[3] is the first kept layer after the shape op names[2].
      const producer = names[2];
      await fakeNaN(page, h.demo, producer, [names[3], names[4]], 'aten::view');
      const asked = [];
      page.on('request', (r) => {
        if (r.url().includes('/api/render/strip')) asked.push(new URL(r.url()).searchParams.get('layer'));
      });

      await page.goto(base);
      await byTestId(`graph-node-${kept.at(-1)}`).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
      const nodes = await page.locator('[data-testid^="graph-node-"]').count();
      if (nodes !== kept.length) throw new Error(`the diagram has ${nodes} nodes, expected the ${kept.length} that are not shape ops`);
      const paths = await page.locator('[data-testid="graph"] path.edge').count();
      if (paths !== foldedEdges.size) throw new Error(`${paths} edges drawn, the folded graph has ${foldedEdges.size}`);
      if (await page.locator(`[data-testid="card-${folded[0]}"]`).count()) throw new Error(`folded ${folded[0]} has a card`);
      await expectText('layer-menu', new RegExp(`Layers\\s*\\d+/${kept.length}`));

      // The producer ran in a folded view: the layer the values entered by
      // is marked instead, and nothing points at the missing node.
      await page.locator(`[data-testid="graph-node-${names[3]}"][data-debug="entry"]`).waitFor({ timeout: UI_TIMEOUT_MS });
      await expectText(`debug-badge-${names[3]}`, 'entered here');
      if (await page.locator('[data-debug="producer"]').count()) throw new Error('a producer is marked, but its node is folded');
      await byTestId('debug-banner-details').click();
      await expectEnabled(`debug-show-${producer}`, false);
      await expectEnabled(`debug-show-${names[3]}`, true);
      await byTestId('debug-close').click();

      // A module's second call: its own node, card and picture.
      await byTestId(`card-${twice}`).scrollIntoViewIfNeeded({ timeout: UI_TIMEOUT_MS });
      await expectImageLoaded(`strip-activation-${twice}`);
      if (!asked.includes(twice)) throw new Error(`no render request named ${twice} (asked for ${[...new Set(asked)].join(', ')})`);
      await byTestId(`card-${twice}`).hover({ position: { x: 50, y: 12 } });
      await page.locator(`[data-testid="graph-node-${twice}"].hovered`).waitFor({ timeout: UI_TIMEOUT_MS });
      await screenshot('shape-ops-folded');

      await byTestId('shape-ops-toggle').check({ force: true });
      await byTestId(`graph-node-${producer}`).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
      await page.locator(`[data-testid="graph-node-${producer}"][data-debug="producer"]`).waitFor({ timeout: UI_TIMEOUT_MS });
      await expectText('layer-menu', new RegExp(`Layers\\s*\\d+/${COUNT}`));
      await page.reload();
      await byTestId(`graph-node-${folded.at(-1)}`).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });
      if (!(await byTestId('shape-ops-toggle').isChecked())) throw new Error('the "Shape ops" switch was not remembered');
      const all = await page.locator('[data-testid^="graph-node-"]').count();
      if (all !== COUNT) throw new Error(`${all} nodes with shape ops shown, expected ${COUNT}`);
      await screenshot('shape-ops-shown');
      if (errors.length) throw new Error(`console errors: ${errors.join(' | ')}`);
    });
  } finally {
    await page.close();
  }
}

await h.run(main);
