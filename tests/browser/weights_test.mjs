// The Weights page against the Fashion-MNIST demo (Adam); run by weights.sh.
// Every wait is Playwright's polling or a deadline, never a fixed sleep; the
// first failure stops the run (later checks build on its state).
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('weights', { uiTimeoutMs: 30_000 });
const { byTestId, expectText, screenshot, check } = h;
const LAYER = 'features.3'; // Conv2d(16, 32, 3): weight [32, 16, 3, 3]
const WEIGHT = `${LAYER}.weight`;

// Waits until the strip's <img> shows `want` (data-* attributes as text).
async function expectStrip(tensor, want, parameter = WEIGHT) {
  const id = `weights-strip-${parameter}-${tensor}`;
  try {
    await h.page.waitForFunction(
      ([sel, w]) => {
        const el = document.querySelector(sel);
        if (!(el instanceof HTMLImageElement) || !el.complete || el.naturalWidth === 0) return false;
        return Object.entries(w).every(([k, v]) => el.dataset[k] === String(v));
      },
      [`[data-testid="${id}"]`, want],
      { timeout: h.uiTimeoutMs },
    );
  } catch {
    const got = await h.page.evaluate((sel) => {
      const el = document.querySelector(sel);
      return el ? JSON.stringify({ ...el.dataset, text: el.textContent }) : '(no such element)';
    }, `[data-testid="${id}"]`);
    throw new Error(`${id} should show ${JSON.stringify(want)}, shows ${got}`);
  }
}

// The <img>'s PNG equals the server's own rendering of the same request.
async function expectSameAsServer(tensor, query) {
  const id = `weights-strip-${WEIGHT}-${tensor}`;
  const same = await h.page.evaluate(
    async ([sel, url]) => {
      const img = document.querySelector(sel);
      const res = await fetch(url);
      const bytes = new Uint8Array(await res.arrayBuffer());
      let binary = '';
      for (const b of bytes) binary += String.fromCharCode(b);
      return img.src === `data:image/png;base64,${btoa(binary)}`;
    },
    [`[data-testid="${id}"]`, `/api/render/weight_strip?layer=${LAYER}&parameter=${WEIGHT}&tensor=${tensor}&${query}`],
  );
  if (!same) throw new Error(`${id} differs from the server's picture for ${query}`);
}

const role = (d) => h.page.locator(`[data-testid="weights-role-${WEIGHT}-${d}"]`);

async function main() {
  // --instruments: a z-score strip under each watched card, Adam's direction on this page.
  await h.startDemo(['--epochs', '1', '--limit-batches', '5', '--instruments']);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1440, height: 1000 }));
  const consoleErrors = collectConsoleErrors(page, {
    // The layer without parameters below is a 400 on purpose.
    ignore: (m) => m.location().url.includes('/api/weight_stats?layer=features.1') && m.text().includes('status of 400'),
  });
  await page.goto(base);

  await check('cards with parameters have Weights, Experiment and Stats buttons; a ReLU has no Weights', async () => {
    await byTestId(`weights-link-${LAYER}`).waitFor({ timeout: h.uiTimeoutMs });
    await byTestId(`stats-link-${LAYER}`).waitFor({ timeout: h.uiTimeoutMs });
    await byTestId(`experiment-link-${LAYER}`).waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('stats-link-features.1').waitFor({ timeout: h.uiTimeoutMs });
    if ((await byTestId('weights-link-features.1').count()) !== 0) throw new Error('features.1 (ReLU) has a Weights button');
    const title = await byTestId(`weights-link-${LAYER}`).getAttribute('title');
    if (!title.includes('(2)')) throw new Error(`the Weights button's title should count 2 parameters: "${title}"`);
  });

  await check("a layer-tensor instrument draws as an extra strip under its card, the server's picture", async () => {
    const id = `strip-instrument-zscore-${LAYER}`;
    await byTestId(`card-${LAYER}`).scrollIntoViewIfNeeded();
    await page.locator(`img[data-testid="${id}"]`).waitFor({ timeout: h.uiTimeoutMs });
    const same = await page.evaluate(
      async ([sel, url]) => {
        const img = document.querySelector(sel);
        const res = await fetch(url);
        if (!res.ok) return `HTTP ${res.status}: ${await res.text()}`;
        const bytes = new Uint8Array(await res.arrayBuffer());
        let binary = '';
        for (const b of bytes) binary += String.fromCharCode(b);
        const mine = await (await fetch(img.src)).arrayBuffer();
        let own = '';
        for (const b of new Uint8Array(mine)) own += String.fromCharCode(b);
        return own === binary ? 'same' : 'differs';
      },
      // What the card asks for by default: sample 0, values unchanged.
      [`img[data-testid="${id}"]`, `/api/render/instrument_strip?layer=${LAYER}&instrument=zscore&sample=0&average=false&values=unchanged`],
    );
    if (same !== 'same') throw new Error(`${id}: ${same} from the server's render_instrument_strip`);
    await screenshot('instrument-card');
  });

  await check("a card's Weights button opens the page on its layer", async () => {
    await byTestId(`weights-link-${LAYER}`).click();
    await page.waitForURL(/\/weights\?layer=features\.3/, { timeout: h.uiTimeoutMs });
    await expectText('weights-title', `Weights · ${LAYER}`);
    await expectText(`weights-shape-${WEIGHT}`, 'shape (32, 16, 3, 3)');
    await expectText(`weights-shape-${LAYER}.bias`, 'shape (32)');
  });

  await check('the conv default: output channel 0, kernels tiled across the 16 input channels', async () => {
    const roles = await Promise.all([0, 1, 2, 3].map((d) => role(d).inputValue()));
    if (roles.join() !== 'index,tile,y,x') throw new Error(`dimension roles are ${roles.join()}`);
    await byTestId(`weights-index-${WEIGHT}-0`).waitFor({ timeout: h.uiTimeoutMs });
    const tiles16 = { tiles: 16, tileWidth: 3, tileHeight: 3 };
    await expectStrip('weight', tiles16);
    await expectStrip('gradient', tiles16);
    await expectStrip('state:exp_avg', tiles16);
    await expectStrip('state:exp_avg_sq', tiles16);
    await expectSameAsServer('weight', 'x_dim=3&y_dim=2&tile_dim=1&index=0,0,0,0');
    await expectText(`weights-scalars-${WEIGHT}`, /step \d+.*lr/);
    // The weight-tensor instrument, laid out like the weight it shares a shape with.
    await expectStrip('instrument:adam_direction', tiles16);
    await expectSameAsServer('instrument:adam_direction', 'x_dim=3&y_dim=2&tile_dim=1&index=0,0,0,0');
    await screenshot('default');
  });

  await check('choosing Tile for dim 0 demotes dim 1 to Index, for every strip of that shape', async () => {
    await role(0).selectOption('tile');
    await page.waitForFunction((sel) => document.querySelector(sel)?.value === 'index', `[data-testid="weights-role-${WEIGHT}-1"]`);
    const layout = 'x3 y2 tile0 index0,0,0,0';
    await expectStrip('weight', { tiles: 32, layout });
    await expectStrip('gradient', { tiles: 32, layout });
    await expectStrip('state:exp_avg_sq', { tiles: 32, layout });
    // Input channel 5 of every output channel.
    await byTestId(`weights-index-${WEIGHT}-1`).fill('5');
    const picked = 'x3 y2 tile0 index0,5,0,0';
    await expectStrip('weight', { tiles: 32, layout: picked });
    await expectStrip('state:exp_avg', { tiles: 32, layout: picked });
    await expectSameAsServer('weight', 'x_dim=3&y_dim=2&tile_dim=0&index=0,5');
    await expectSameAsServer('gradient', 'x_dim=3&y_dim=2&tile_dim=0&index=0,5');
    // The bias keeps its own controls: one row of 32.
    await expectStrip('weight', { tiles: 1, tileWidth: 32, tileHeight: 1 }, `${LAYER}.bias`);
    await screenshot('tiles-over-outputs');
  });

  await check('the page follows the run: a step redraws it from the new snapshot', async () => {
    const before = Number(await byTestId('weights-main').getAttribute('data-sequence'));
    await h.demo.api('/api/step', { unit: 'batch', timeout_seconds: 30 });
    await page.waitForFunction(
      ([sel, n]) => Number(document.querySelector(sel)?.dataset.sequence ?? 0) > n,
      ['[data-testid="weights-main"]', before],
      { timeout: h.uiTimeoutMs },
    );
    const now = Number(await byTestId('weights-main').getAttribute('data-sequence'));
    await expectStrip('weight', { sequence: now, tiles: 32 });
    await expectSameAsServer('weight', 'x_dim=3&y_dim=2&tile_dim=0&index=0,5');
  });

  await check('a deep link opens a linear layer as one matrix image', async () => {
    await page.goto(`${new URL(base).origin}/weights?layer=classifier.4`);
    await expectText('weights-title', 'Weights · classifier.4');
    await expectStrip('weight', { tiles: 1, tileWidth: 64, tileHeight: 10 }, 'classifier.4.weight');
    await expectStrip('weight', { tiles: 1, tileWidth: 10, tileHeight: 1 }, 'classifier.4.bias');
  });

  await check('a layer without parameters is refused with what to open instead', async () => {
    await page.goto(`${new URL(base).origin}/weights?layer=features.1`);
    await expectText('weights-error', /has no parameters; layers with parameters: features\.0, features\.3/);
    await screenshot('no-parameters');
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });
}

await h.run(main);
