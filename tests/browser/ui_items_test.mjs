// Page features the original offers beside the big views, against the
// Fashion-MNIST demo (C++, then the Python one for the brand line); run by
// ui_items.sh. Every wait is Playwright's polling or a deadline, never a
// fixed sleep; the first failure stops the run (later checks build on its
// state).
import { readFileSync } from 'node:fs';
import { Demo, Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('ui_items', {
  options: { python: { type: 'string' }, 'python-path': { type: 'string' }, 'python-demo': { type: 'string' } },
  uiTimeoutMs: 30_000,
});
const { byTestId, expectText, screenshot, check } = h;
// Watched by the demo from the start (with features.3 and two classifier layers).
const WATCHED = 'features.0';
// Not watched: only "Current batch" has its statistics.
const UNWATCHED = 'features.4';

const api = (path, body) => h.demo.api(path, body);

async function visible(id) {
  return h.page.getByTestId(id).first().isVisible();
}

async function waitVisible(id, want) {
  await byTestId(id).first().waitFor({ state: want ? 'visible' : 'hidden', timeout: h.uiTimeoutMs });
}

// A control disabled through its fieldset has no disabled attribute of its
// own: :disabled says whether it is.
async function expectHeld(id, held) {
  await h.page.locator(`[data-testid="${id}"]:${held ? 'disabled' : 'enabled'}`).waitFor({ timeout: h.uiTimeoutMs });
}

// The brand line is hidden in a window under 1500 px: its text, shown or not.
async function expectBrand(text) {
  try {
    await h.page.waitForFunction((t) => document.querySelector('[data-testid="brand-sub"]')?.textContent === t, text, {
      timeout: h.uiTimeoutMs,
    });
  } catch {
    const actual = await h.page.getByTestId('brand-sub').textContent().catch(() => '(none)');
    throw new Error(`the brand line reads "${actual}", not "${text}"`);
  }
}

async function width(id) {
  return (await byTestId(id).first().boundingBox())?.width ?? 0;
}

async function main() {
  await h.startDemo(['--epochs', '1', '--limit-batches', '12']);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1440, height: 1000 }));
  const consoleErrors = collectConsoleErrors(page);
  await page.goto(base);
  await byTestId(`card-${WATCHED}`).waitFor({ timeout: h.uiTimeoutMs });

  await check('pane toggles: the architecture and input panes go away (the cards take the room), stay away on reload, come back', async () => {
    await waitVisible('graph', true);
    await waitVisible('input-image', true);
    const before = await width('cards-pane');
    await byTestId('toggle-architecture-pane').click();
    await waitVisible('graph', false);
    await byTestId('toggle-input-pane').click();
    await waitVisible('input-image', false);
    const after = await width('cards-pane');
    if (!(after > before + 300)) throw new Error(`the cards pane is ${after} px wide with both side panes away, ${before} px before`);
    await screenshot('panes-away');
    await page.reload();
    await byTestId(`card-${WATCHED}`).waitFor({ timeout: h.uiTimeoutMs });
    if ((await visible('graph')) || (await visible('input-image'))) throw new Error('a pane put away came back on reload');
    if ((await byTestId('toggle-input-pane').getAttribute('aria-pressed')) !== 'false') throw new Error('the input toggle reads pressed');
    await byTestId('toggle-architecture-pane').click();
    await byTestId('toggle-input-pane').click();
    await waitVisible('graph', true);
    await waitVisible('input-image', true);
  });

  await check('the brand line says the run is a LibTorch (C++) program', async () => {
    await expectBrand('LibTorch debugger');
    const title = await byTestId('brand').getAttribute('title');
    if (!/LibTorch \(C\+\+\)/.test(title)) throw new Error(`the brand's tooltip says "${title}"`);
  });

  await check('layer menu: collecting statistics pauses and resumes (the server\'s scope; the eye turns red and back)', async () => {
    const { stats } = await api('/api/status');
    if (stats.scope !== 'watched') throw new Error(`the demo starts with scope ${stats.scope}`);
    await byTestId('layer-menu').click();
    await expectText('toggle-collecting', 'Pause collecting stats');
    await byTestId('toggle-collecting').click();
    // The eye follows the status push: the server's scope.
    await page.locator('[data-testid="layer-menu"][data-collecting="false"]').waitFor({ timeout: h.uiTimeoutMs });
    if ((await api('/api/status')).stats.scope !== 'none') throw new Error('the server still collects');
    await expectText('toggle-collecting', 'Resume collecting stats');
    await screenshot('collecting-paused');
    await byTestId('toggle-collecting').click();
    await page.locator('[data-testid="layer-menu"][data-collecting="true"]').waitFor({ timeout: h.uiTimeoutMs });
    // Back to the scope it had, not "all".
    if ((await api('/api/status')).stats.scope !== 'watched') throw new Error('collection did not resume on the watched layers');
  });

  await check('layer menu: Open statistics lists the shown layers; Current-batch stats opens any layer\'s last batch', async () => {
    const href = await byTestId(`open-stats-${WATCHED}`).getAttribute('href');
    const u = new URL(href, base);
    if (u.pathname !== '/stats' || u.searchParams.get('layer') !== WATCHED) throw new Error(`Open statistics links ${href}`);
    const cards = await page.locator('[data-tour="card"]').evaluateAll((els) => els.map((e) => e.dataset.layer));
    const listed = await page.locator('[data-testid="open-stats-list"] a').evaluateAll((els) => els.map((e) => e.textContent.trim()));
    if (JSON.stringify(listed) !== JSON.stringify(cards)) throw new Error(`Open statistics lists ${listed}, the cards are ${cards}`);
    await byTestId('current-stats-menu').click();
    await byTestId(`current-stats-${UNWATCHED}`).click();
    await page.waitForURL((url) => url.pathname === '/stats');
    const q = new URL(page.url()).searchParams;
    if (q.get('layer') !== UNWATCHED || q.get('phase') !== 'current') throw new Error(`opened ${page.url()}`);
    await page.locator('[data-testid="stats-main"][data-phase="current"]').waitFor({ timeout: h.uiTimeoutMs });
    if (!(await byTestId('phase-current').isChecked())) throw new Error('Current batch is not the phase picked');
    await byTestId(`stats-card-${UNWATCHED}`).waitFor({ timeout: h.uiTimeoutMs });
    await expectText('stats-table', /current batch/);
  });

  await check('Min/Max: Current batch draws the last captured batch\'s extremes of an unwatched layer, and follows a step', async () => {
    await byTestId('view-minmax').check();
    const gallery = page.locator(`[data-testid="gallery-${UNWATCHED}"][data-grid="max_pixel"]`);
    await gallery.waitFor({ timeout: h.uiTimeoutMs });
    const r = await api(`/api/stats/patches?layer=${encodeURIComponent(UNWATCHED)}&current_batch=true`);
    const filled = r.cells.filter((c) => c.filled).length;
    if (!r.current_batch || filled === 0) throw new Error(`the API's current gallery: ${JSON.stringify({ ...r, cells: r.cells.length })}`);
    if (Number(await gallery.getAttribute('data-filled')) !== filled) throw new Error(`the page fills ${await gallery.getAttribute('data-filled')} cells, the API ${filled}`);
    // One batch: every kept input of a slot comes from it.
    if (r.cells.some((c) => c.filled && c.batch !== r.cells.find((x) => x.filled).batch)) throw new Error('cells from two batches');
    await expectText(`gallery-caption-${UNWATCHED}`, new RegExp(`current batch \\(${r.position.replace(/[|]/g, '\\|')}\\)`));
    // The epoch's gallery of an unwatched layer has nothing: this is the current batch's.
    const epoch = await fetch(`${base}/api/stats/patches?layer=${encodeURIComponent(UNWATCHED)}`);
    if (epoch.ok) throw new Error(`the epoch gallery of ${UNWATCHED} answered ${epoch.status}`);
    await screenshot('minmax-current');
    await api('/api/step', { unit: 'batch', timeout_seconds: 30 });
    const next = await api(`/api/stats/patches?layer=${encodeURIComponent(UNWATCHED)}&current_batch=true`);
    if (next.position === r.position) throw new Error('the step did not move the current batch');
    await expectText(`gallery-caption-${UNWATCHED}`, new RegExp(`current batch \\(${next.position.replace(/[|]/g, '\\|')}\\)`));
    // A phase picked: the epoch's gallery, for a watched layer.
    await byTestId('layer-picker').selectOption(WATCHED);
    await byTestId('phase-train').check();
    await expectText(`gallery-caption-${WATCHED}`, /train epoch 0/);
  });

  await check('Weights page opened bare shows the first layer with weights', async () => {
    await page.goto(`${base}/weights`);
    await expectText('weights-title', `Weights · ${WATCHED}`);
    await h.expectImageLoaded(`weights-strip-${WATCHED}.weight-weight`);
    if (new URL(page.url()).searchParams.get('layer') !== WATCHED) throw new Error(`the address is ${page.url()}`);
  });

  await check('Experiment page: a deep dream offers Compare with MIN/MAX on its layer; other kinds do not', async () => {
    await page.goto(`${base}/experiment?layer=${encodeURIComponent(WATCHED)}&kind=gradcam`);
    await byTestId('experiment-layer').waitFor({ timeout: h.uiTimeoutMs });
    if (await byTestId('compare-minmax').count()) throw new Error('Grad-CAM offers Compare with MIN/MAX');
    await byTestId('experiment-kind').selectOption('deep_dream');
    await byTestId('compare-minmax').click();
    await page.waitForURL((url) => url.pathname === '/stats');
    const q = new URL(page.url()).searchParams;
    if (q.get('layer') !== WATCHED || q.get('view') !== 'minmax') throw new Error(`opened ${page.url()}`);
    await page.locator(`[data-testid="gallery-${WATCHED}"]`).waitFor({ timeout: h.uiTimeoutMs });
  });

  await check('a recording of the main page holds its sample, probe and cards; of a Weights page, its axis controls', async () => {
    await page.goto(base);
    await byTestId(`card-${WATCHED}`).waitFor({ timeout: h.uiTimeoutMs });
    await expectHeld('sample-input', false);
    const probeEnabled = () => page.locator('[data-testid="probe"] :is(input, select, button):enabled').count();
    if ((await probeEnabled()) === 0) throw new Error('no probe control is enabled before recording');
    await api('/api/recordings/start', { view: 'layers', layers: [WATCHED] });
    await byTestId('input-fixed').waitFor({ timeout: h.uiTimeoutMs });
    await expectHeld('sample-input', true);
    await h.expectEnabled(`hide-${WATCHED}`, false);
    if ((await probeEnabled()) !== 0) throw new Error('a probe control is enabled while the page records');
    await byTestId('layer-menu').click();
    await h.expectEnabled('show-all', false);
    await page.keyboard.press('Escape');
    await screenshot('main-fixed');
    await api('/api/recordings/discard', { key: 'main' });
    await h.gone('input-fixed');
    await expectHeld('sample-input', false);
    await h.expectEnabled(`hide-${WATCHED}`, true);

    await page.goto(`${base}/weights?layer=${encodeURIComponent(WATCHED)}`);
    const strip = byTestId(`weights-strip-${WATCHED}.weight-weight`);
    await h.expectImageLoaded(`weights-strip-${WATCHED}.weight-weight`);
    const defaultLayout = await strip.getAttribute('data-layout');
    // Another layout of the user's: the output channel index to 1.
    await byTestId(`weights-index-${WATCHED}.weight-0`).fill('1');
    await page.waitForFunction(
      ([sel, was]) => document.querySelector(sel)?.dataset.layout !== was,
      [`[data-testid="weights-strip-${WATCHED}.weight-weight"]`, defaultLayout],
      { timeout: h.uiTimeoutMs },
    );
    const mine = await strip.getAttribute('data-layout');
    await api('/api/recordings/start', { view: 'weights', layer: WATCHED });
    await byTestId('weights-fixed').waitFor({ timeout: h.uiTimeoutMs });
    await h.expectEnabled(`weights-role-${WATCHED}.weight-0`, false);
    await h.expectEnabled(`weights-index-${WATCHED}.weight-0`, false);
    // The page draws what the video does: the default layout.
    await page.locator(`[data-testid="weights-strip-${WATCHED}.weight-weight"][data-layout="${defaultLayout}"]`).waitFor({ timeout: h.uiTimeoutMs });
    await screenshot('weights-fixed');
    await api('/api/recordings/discard', { key: `weights:${WATCHED}` });
    await h.gone('weights-fixed');
    await h.expectEnabled(`weights-role-${WATCHED}.weight-0`, true);
    await page.locator(`[data-testid="weights-strip-${WATCHED}.weight-weight"][data-layout="${mine}"]`).waitFor({ timeout: h.uiTimeoutMs });
  });

  await check('Share: the targets, the live preview, the platform buttons, a saved recording played and downloaded', async () => {
    await page.goto(base);
    await byTestId(`card-${WATCHED}`).waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('share').click();
    await byTestId('share-dialog').waitFor({ timeout: h.uiTimeoutMs });
    const link = await byTestId('share-page-link').inputValue();
    const frame = await byTestId('share-preview-frame').getAttribute('src');
    if (frame !== link) throw new Error(`the preview frames ${frame}, the link is ${link}`);
    // The framed page is the app itself, live.
    await page.frameLocator('[data-testid="share-preview-frame"]').getByTestId(`card-${WATCHED}`).waitFor({ timeout: h.uiTimeoutMs });
    const x = new URL(await byTestId('share-page-on-x').getAttribute('href'));
    if (x.hostname !== 'x.com' || x.searchParams.get('url') !== link) throw new Error(`X shares ${x}`);
    const hn = new URL(await byTestId('share-page-on-hn').getAttribute('href'));
    if (hn.searchParams.get('u') !== link) throw new Error(`Hacker News shares ${hn}`);
    const mail = await byTestId('share-page-on-email').getAttribute('href');
    if (!mail.startsWith('mailto:') || !decodeURIComponent(mail).includes(link)) throw new Error(`Email shares ${mail}`);
    for (const p of ['facebook', 'linkedin', 'reddit']) {
      const href = await byTestId(`share-page-on-${p}`).getAttribute('href');
      if (!href.includes(encodeURIComponent(link))) throw new Error(`${p} shares ${href}`);
    }
    await byTestId('share-target-video').click();
    await byTestId('share-video-none').waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('share-target-library').click();
    const library = await byTestId('share-library-link').inputValue();
    if (library !== 'https://pypi.org/project/nansense/') throw new Error(`the library link is ${library}`);
    await byTestId('share-library-on-reddit').waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('share-close').click();

    // A recording: named while it records, playable once saved (three frames of the main view).
    await api('/api/recordings/start', { view: 'layers', layers: [WATCHED] });
    await byTestId('share').click();
    await byTestId('share-target-video').click();
    await expectText('share-video-active', /still recording/);
    if (await byTestId('share-video-link').count()) throw new Error('a link to a file still being written');
    await byTestId('share-close').click();
    for (let i = 0; i < 2; ++i) await api('/api/step', { unit: 'batch', timeout_seconds: 30 });
    const saved = await api('/api/recordings/stop', { key: 'main' });
    const path = saved.files[0];
    await byTestId('share').click();
    await byTestId('share-target-video').click();
    await page.waitForFunction(
      () => {
        const v = document.querySelector('[data-testid="share-video-player"]');
        return v && v.readyState >= 1 && v.duration > 0 && v.videoWidth > 0;
      },
      null,
      { timeout: h.uiTimeoutMs },
    );
    const src = new URL(await byTestId('share-video-player').getAttribute('src'));
    if (src.searchParams.get('path') !== path) throw new Error(`the player plays ${src}, the recording is ${path}`);
    if ((await byTestId('share-video-link').inputValue()) !== src.href) throw new Error('the video link is not the played file');
    await screenshot('share-video');
    const [download] = await Promise.all([page.waitForEvent('download', { timeout: h.uiTimeoutMs }), byTestId('share-video-download').click()]);
    if (download.suggestedFilename() !== path.split('/').pop()) throw new Error(`downloaded as ${download.suggestedFilename()}`);
    const bytes = readFileSync(await download.path());
    if (!bytes.equals(readFileSync(path))) throw new Error(`the download (${bytes.length} bytes) is not the saved file`);
    await byTestId('share-close').click();
    // A path the run did not save is refused.
    const other = await fetch(`${base}/api/recordings/file?path=${encodeURIComponent('/etc/passwd')}`);
    if (other.status !== 404) throw new Error(`a foreign path answered ${other.status}`);
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });

  // The Python demo: the same page over the Python package's session.
  await h.demo.kill();
  h.demo = new Demo(h.args.python, {
    log: h.logPath,
    pidfile: h.args.pidfile,
    prefix: [h.args['python-demo']],
    env: { PYTHONPATH: h.args['python-path'] },
  });
  await check('the brand line says a Python run is a PyTorch one', async () => {
    await h.startDemo(['--epochs', '1', '--limit-batches', '2']);
    await page.goto(h.demo.base);
    await expectBrand('PyTorch debugger');
    const title = await byTestId('brand').getAttribute('title');
    if (!/PyTorch training loop run from Python/.test(title)) throw new Error(`the brand's tooltip says "${title}"`);
    await screenshot('python-brand');
  });
}

await h.run(main);
