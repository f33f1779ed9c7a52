// The Stats page and live updates against the Fashion-MNIST demo; run by
// stats.sh. Every wait is Playwright's polling or a deadline, never a fixed
// sleep; the first failure stops the run (later checks build on its state).
import { readFileSync } from 'node:fs';
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('stats', { uiTimeoutMs: 30_000 });
const { byTestId, expectText, screenshot, check } = h;
const UI_TIMEOUT_MS = h.uiTimeoutMs;
// Long enough that the run is still going while the checks watch it; the
// test pauses it once they have seen what they wait for.
const DEMO_ARGS = ['--epochs', '40', '--limit-batches', '10'];
// Watched by the demo from the start; EYE_LAYER is not, until the eye says so.
const LAYER = 'features.0';
const EYE_LAYER = 'features.1';
const LINES = `chart-${LAYER}-lines-activation`;
const HIST = `chart-${LAYER}-hist-activation`;

const api = (path, body) => h.demo.api(path, body);

// A chart's plotted point count (its data-points) once a canvas is drawn.
function chartPoints(id) {
  return h.page.evaluate((sel) => {
    const el = document.querySelector(sel);
    return el && el.querySelector('canvas') && el.dataset.drawnPoints ? Number(el.dataset.points) : 0;
  }, `[data-testid="${id}"]`);
}

// Waits until the chart has drawn more than `than` points while the run-state
// pill still says running: the update arrived while training ran.
async function waitForGrowthWhileRunning(id, than) {
  try {
    await h.page.waitForFunction(
      ([sel, n]) => {
        const el = document.querySelector(sel);
        const state = document.querySelector('[data-testid="run-state"]')?.textContent?.trim();
        return el?.querySelector('canvas') && Number(el.dataset.drawnPoints ?? 0) > n && state === 'running';
      },
      [`[data-testid="${id}"]`, than],
      { timeout: 90_000 },
    );
  } catch {
    throw new Error(`${id} did not grow past ${than} points while the loop ran (now ${await chartPoints(id)})`);
  }
}

// The rows of a downloaded CSV (the header first), cells as text.
async function downloadCsv(id) {
  const [download] = await Promise.all([h.page.waitForEvent('download', { timeout: UI_TIMEOUT_MS }), byTestId(`${id}-csv`).click()]);
  const text = readFileSync(await download.path(), 'utf8');
  return text.trim().split('\n').map((line) => line.split(','));
}

const same = (cell, value) => (value === null ? cell === '' : Number(cell) === Number(value) || cell === String(value));

async function main() {
  await h.startDemo(DEMO_ARGS);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1440, height: 1000 }));
  const consoleErrors = collectConsoleErrors(page, {
    // The refused update frequency below is a 400 on purpose.
    ignore: (m) => m.location().url.endsWith('/api/stats/update_frequency') && m.text().includes('status of 400'),
  });
  await page.goto(base);
  await expectText('connection', 'live');

  await check('the eye on a card watches its layer (the status says so)', async () => {
    const eye = byTestId(`watch-${EYE_LAYER}`);
    await page.locator(`[data-testid="watch-${EYE_LAYER}"][data-watched="false"]`).waitFor({ timeout: UI_TIMEOUT_MS });
    await eye.click();
    await page.locator(`[data-testid="watch-${EYE_LAYER}"][data-watched="true"]`).waitFor({ timeout: UI_TIMEOUT_MS });
    const { stats } = await api('/api/status');
    if (!stats.watched_layers.includes(EYE_LAYER)) throw new Error(`status.stats.watched_layers is ${JSON.stringify(stats.watched_layers)}`);
    await screenshot('watched');
  });

  await check('the settings dialog refuses a bad update frequency inline, then sets one the server confirms', async () => {
    await byTestId('settings-gear').click();
    await byTestId('stats-settings').waitFor({ timeout: UI_TIMEOUT_MS });
    // Twice a second: the pages follow the run without rendering every batch.
    await byTestId('update-unit').selectOption('seconds');
    await byTestId('update-n').fill('0');
    await byTestId('update-n').blur();
    await expectText('update-frequency-error', /\bn\b/);
    await screenshot('settings-refused');
    await byTestId('update-n').fill('0.5');
    await byTestId('update-n').blur();
    await expectText('update-frequency-saved', 'Saved');
    const settings = await api('/api/settings');
    const f = settings.update_frequency;
    if (f.unit !== 'seconds' || f.n !== 0.5 || f.phase !== null) throw new Error(`GET /api/settings: ${JSON.stringify(f)}`);
    const { stats } = await api('/api/status');
    if (stats.update_frequency.unit !== 'seconds' || stats.update_frequency.n !== 0.5) throw new Error(`status: ${JSON.stringify(stats.update_frequency)}`);
    await screenshot('settings');
    await page.keyboard.press('Escape');
    await h.gone('debug-settings-dialog');
  });

  await check('the main page follows a running loop (cards re-render at the update cadence)', async () => {
    const before = Number((await page.evaluate(() => document.body.dataset.renderedSequence)) ?? 0);
    await byTestId('run').click();
    await expectText('run-state', 'running');
    try {
      await page.waitForFunction(
        (n) =>
          Number(document.body.dataset.renderedSequence ?? 0) > n + 1 &&
          document.querySelector('[data-testid="run-state"]')?.textContent?.trim() === 'running',
        before,
        { timeout: 60_000 },
      );
    } catch {
      throw new Error(`the cards stayed at snapshot ${await page.evaluate(() => document.body.dataset.renderedSequence)} while running`);
    }
    await expectText('run-state', 'running');
    await screenshot('main-running');
  });

  await check("the card's Stats link opens /stats for its layer", async () => {
    await byTestId(`stats-link-${LAYER}`).click();
    await page.waitForURL((url) => url.pathname === '/stats' && url.searchParams.get('layer') === LAYER, { timeout: UI_TIMEOUT_MS });
    await byTestId('stats-sidebar').waitFor({ timeout: UI_TIMEOUT_MS });
    await byTestId(`stats-card-${LAYER}`).waitFor({ timeout: UI_TIMEOUT_MS });
  });

  let seen = 0;
  await check('Graphs: the per-epoch lines draw and grow while training runs, without a reload', async () => {
    await byTestId('view-graphs').check();
    await page.locator('[data-testid="stats-main"][data-view="graphs"]').waitFor({ timeout: UI_TIMEOUT_MS });
    await page.waitForFunction((sel) => document.querySelector(sel)?.querySelector('canvas'), `[data-testid="${LINES}"]`, { timeout: 60_000 });
    seen = await chartPoints(LINES);
    const navigations = await page.evaluate(() => performance.getEntriesByType('navigation').length);
    await waitForGrowthWhileRunning(LINES, Math.max(seen, 1));
    if ((await page.evaluate(() => performance.getEntriesByType('navigation').length)) !== navigations) throw new Error('the page reloaded');
    await screenshot('graphs-running');
  });

  await check('Pause from the Stats page stops the loop', async () => {
    await byTestId('pause').click();
    await expectText('run-state', 'paused', 60_000);
  });

  await check("the lines' CSV holds exactly the numbers /api/stats/history has", async () => {
    // The page shows what it last fetched: wait until that is the paused state.
    const { stats } = await api('/api/status');
    try {
      await page.locator(`[data-testid="stats-main"][data-stats-sequence="${stats.sequence}"]`).waitFor({ timeout: UI_TIMEOUT_MS });
    } catch {
      throw new Error(`the page did not fetch the statistics of sequence ${stats.sequence}`);
    }
    const history = await api(`/api/stats/history?layer=${encodeURIComponent(LAYER)}`);
    const phase = await page.getAttribute('[data-testid="stats-main"]', 'data-phase');
    const buckets = history.phases[phase].filter((b) => b.activation);
    const [header, ...rows] = await downloadCsv(LINES);
    const keys = ['mean', 'std', 'median', 'min', 'max'];
    if (header.join(',') !== ['epoch', ...keys, 'dead channels'].join(',')) throw new Error(`CSV header ${header.join(',')}`);
    if (rows.length !== buckets.length) throw new Error(`CSV has ${rows.length} rows, the history ${buckets.length} epochs`);
    rows.forEach((row, i) => {
      const b = buckets[i];
      const want = [b.epoch, ...keys.map((k) => b.activation[k]), b.activation.dead_count];
      want.forEach((v, j) => {
        if (!same(row[j], v)) throw new Error(`row ${i} column ${header[j]}: CSV ${row[j]}, history ${v}`);
      });
    });
  });

  await check('Histogram: tables and the signed-log histogram draw, and its CSV is the newest epoch\'s bins', async () => {
    await byTestId('view-histogram').check();
    await page.locator('[data-testid="stats-main"][data-view="histogram"]').waitFor({ timeout: UI_TIMEOUT_MS });
    await byTestId('stats-table').first().waitFor({ timeout: UI_TIMEOUT_MS });
    await page.waitForFunction((sel) => document.querySelector(sel)?.querySelector('canvas'), `[data-testid="${HIST}"]`, { timeout: UI_TIMEOUT_MS });
    const points = await chartPoints(HIST);
    if (points !== 212) throw new Error(`the histogram plots ${points} edges, not 212`);
    await screenshot('histogram');
    const history = await api(`/api/stats/history?layer=${encodeURIComponent(LAYER)}`);
    // features.0's [64,16,28,28] activations are binned from an even sample
    // (histogram_sample): the API and the page both say so.
    const sampledPhase = Object.values(history.phases).map((b) => b.at(-1)?.activation).find((a) => a?.hist);
    const total = sampledPhase.n + sampledPhase.nan + sampledPhase.pos_inf + sampledPhase.neg_inf;
    if (!(sampledPhase.binned > 0 && sampledPhase.binned < total)) throw new Error(`binned ${sampledPhase.binned} of ${total}`);
    await expectText(`stats-card-${LAYER}`, /histogram sampled: .+ of .+ values \(about 1 in \d+, evenly spread\)/);
    const [header, ...rows] = await downloadCsv(HIST);
    if (rows.length !== 211) throw new Error(`the histogram CSV has ${rows.length} bins`);
    header.slice(3).forEach((label, k) => {
      const phase = label.replace(/ ep \d+$/, '');
      const buckets = history.phases[phase];
      if (!buckets?.length) {
        throw new Error(`the CSV's column "${label}" names phase "${phase}", which /api/stats/history lacks ` +
                        `(its phases: ${JSON.stringify(Object.keys(history.phases))}; CSV header ${JSON.stringify(header)})`);
      }
      const newest = buckets.at(-1);
      if (label !== `${phase} ep ${newest.epoch}`) throw new Error(`column ${label}: the newest ${phase} epoch is ${newest.epoch}`);
      rows.forEach((row, i) => {
        if (Number(row[0]) !== i || !same(row[1], history.edges[i]) || !same(row[2], history.edges[i + 1])) throw new Error(`bin ${i}: ${row.slice(0, 3)}`);
        if (Number(row[3 + k]) !== newest.activation.hist[i]) throw new Error(`${label} bin ${i}: CSV ${row[3 + k]}, history ${newest.activation.hist[i]}`);
      });
    });
  });

  await check('Log x off redraws the histogram; Current batch shows the last captured batch', async () => {
    await byTestId('log-x').uncheck();
    await page.waitForFunction((sel) => document.querySelector(sel)?.querySelector('canvas'), `[data-testid="${HIST}"]`, { timeout: UI_TIMEOUT_MS });
    await byTestId('phase-current').check();
    await page.locator('[data-testid="stats-main"][data-phase="current"]').waitFor({ timeout: UI_TIMEOUT_MS });
    await expectText('stats-table', /current batch/);
    const { position } = await api(`/api/stats/current?layer=${encodeURIComponent(LAYER)}`);
    await expectText(`stats-card-${LAYER}`, new RegExp(`Last captured batch: ${position.text.replace(/[|]/g, '\\|')}`));
    await screenshot('current-batch');
  });

  await check('Histogram: hovering a per-channel bar shows that bin\'s elements of the last captured batch with their crops', async () => {
    await byTestId(`per-channel-${LAYER}`).check();
    await byTestId(`channel-${LAYER}`).selectOption('2');
    const plot = page.locator(`[data-testid="${HIST}"] .u-over`);
    await plot.waitFor({ timeout: UI_TIMEOUT_MS });
    const box = await plot.boundingBox();
    const panel = page.locator(`[data-testid="bin-samples-${LAYER}-activation"]`);
    // Sweep the plot until the cursor is over a bar that holds values.
    let found = false;
    for (let i = 1; i < 40 && !found; ++i) {
      await page.mouse.move(box.x + (box.width * i) / 40, box.y + box.height / 2);
      try {
        await page.waitForFunction(
          (sel) => {
            const el = document.querySelector(sel);
            return el && Number(el.dataset.matches ?? 0) > 0 && el.querySelector('[data-testid="bin-sample"] img');
          },
          `[data-testid="bin-samples-${LAYER}-activation"]`,
          { timeout: 1500 },
        );
        found = true;
      } catch {
        // An empty bar, or the answer still on its way: the next position.
      }
    }
    if (!found) throw new Error(`no bar of ${HIST} showed bin samples (panel: ${await panel.count() ? await panel.textContent() : 'none'})`);
    const bin = Number(await panel.getAttribute('data-bin'));
    const matches = Number(await panel.getAttribute('data-matches'));
    const r = await api(`/api/stats/bin_samples?layer=${encodeURIComponent(LAYER)}&channel=2&bin=${bin}`);
    if (r.matches !== matches) throw new Error(`the page says ${matches} values in bin ${bin}, the API ${r.matches}`);
    const shown = await page.locator(`[data-testid="bin-samples-${LAYER}-activation"] [data-testid="bin-sample"]`).count();
    if (shown !== Math.min(6, matches)) throw new Error(`${shown} bin samples shown for ${matches} matches`);
    await screenshot('bin-samples');
  });

  await check('Min/Max: per channel, the inputs that drove it highest, best first; Min pixel and the heatmap redraw it', async () => {
    await byTestId('view-minmax').check();
    await page.locator('[data-testid="stats-main"][data-view="minmax"]').waitFor({ timeout: UI_TIMEOUT_MS });
    if (new URL(page.url()).searchParams.get('view') !== 'minmax') throw new Error(`the address keeps ${page.url()}`);
    // "Current batch" (picked above) stays picked in this view too: back to the epoch's gallery.
    await byTestId('phase-train').check();
    await page.locator('[data-testid="stats-main"][data-phase="train"]').waitFor({ timeout: UI_TIMEOUT_MS });
    const gallery = page.locator(`[data-testid="gallery-${LAYER}"][data-grid="max_pixel"]`);
    await gallery.waitFor({ timeout: UI_TIMEOUT_MS });
    const phase = await page.getAttribute('[data-testid="stats-main"]', 'data-phase');
    const api_gallery = await api(`/api/stats/patches?layer=${encodeURIComponent(LAYER)}&phase=${phase}`);
    const filled = api_gallery.cells.filter((c) => c.filled).length;
    if (filled === 0) throw new Error(`the API's gallery is empty: ${api_gallery.note}`);
    if (Number(await gallery.getAttribute('data-filled')) !== filled) throw new Error(`the page fills ${await gallery.getAttribute('data-filled')} cells, the API ${filled}`);
    const images = await gallery.locator('[data-testid="gallery-cell"] img').count();
    if (images !== filled) throw new Error(`${images} images for ${filled} filled cells`);
    // Column 0's scores fall down the rows.
    const scores = await gallery.locator('tbody tr td:first-of-type [data-testid="gallery-cell"]').evaluateAll((els) => els.map((e) => Number(e.dataset.score)));
    if (scores.some((v, i) => i > 0 && v > scores[i - 1])) throw new Error(`channel 0's scores are not best first: ${scores}`);
    await screenshot('minmax');
    await byTestId('grid-min_pixel').check();
    await page.locator(`[data-testid="gallery-${LAYER}"][data-grid="min_pixel"]`).waitFor({ timeout: UI_TIMEOUT_MS });
    const before = await page.locator(`[data-testid="gallery-${LAYER}"] [data-testid="gallery-cell"] img`).first().getAttribute('src');
    await byTestId('heatmap').check();
    await page.waitForFunction(
      ([sel, src]) => {
        const img = document.querySelector(sel);
        return img && img.getAttribute('src') !== src;
      },
      [`[data-testid="gallery-${LAYER}"] [data-testid="gallery-cell"] img`, before],
      { timeout: UI_TIMEOUT_MS },
    );
    await screenshot('minmax-heatmap');
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });
}

await h.run(main);
