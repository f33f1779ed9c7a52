// The guided tours and the Share dialog against the Fashion-MNIST demo; run
// by tour.sh. Every wait is Playwright's polling or a deadline, never a fixed
// sleep; the first failure stops the run (later checks build on its state).
//
// A locked session (a playground) is faked for the auto-start checks: the
// demo is not locked, so /api/status and the /ws push's status messages are
// intercepted (page.route, page.routeWebSocket) and given `locked: true`.
// The Recordings section is checked against an intercepted /api/recordings
// reply, as this server may not have the list_recordings command yet (its
// absence, a 404, must leave the section out: checked too).
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('tour', { uiTimeoutMs: 30_000 });
const { byTestId, expectText, screenshot, check } = h;
const LAYER = 'features.3'; // Conv2d: a card with Weights, Experiment and Stats links

// Two animation frames: every effect of the last render has run (what the
// "nothing happened" checks wait for; the auto-start decides synchronously
// when its target appears).
const settle = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

// The tour's box as it stands: its step, count, target and text, whether
// the ring sits around the target, and whether the target is drawn. Runs in
// the page.
function readTourState() {
  const box = document.querySelector('[data-testid="tour-box"]');
  if (!box) return null;
  const target = box.dataset.target;
  const el = [...document.querySelectorAll(`[data-tour="${target}"]`)].find((e) => e.getClientRects().length > 0);
  const ring = document.querySelector('[data-testid="tour-ring"]');
  let ringFits = false;
  if (el && ring) {
    const t = el.getBoundingClientRect();
    const r = ring.getBoundingClientRect();
    const near = (a, b) => Math.abs(a - b) <= 1.5;
    ringFits = near(r.left, t.left - 4) && near(r.top, t.top - 4) && near(r.width, t.width + 8) && near(r.height, t.height + 8);
  }
  return {
    step: Number(box.dataset.step),
    count: Number(box.dataset.count),
    target,
    text: box.querySelector('[data-testid="tour-text"]').textContent,
    drawn: el != null,
    ringFits,
    focused: box.contains(document.activeElement),
  };
}

function tourState(page) {
  return page.evaluate(readTourState);
}

async function expectStep(page, step, timeout = h.uiTimeoutMs) {
  try {
    await page.waitForFunction(
      (n) => {
        const box = document.querySelector('[data-testid="tour-box"]');
        return box != null && Number(box.dataset.step) === n;
      },
      step,
      { timeout },
    );
  } catch {
    throw new Error(`the tour should be at step ${step}, is at ${JSON.stringify(await tourState(page))}`);
  }
  // The ring follows the target (scrolled into view) within a frame or two.
  // The state is the one read in the frame where it fits: on a page still
  // laying out as data arrives (the Stats page) the target moves again, and
  // the ring a frame after it.
  const fitted = await page
    .waitForFunction(`(() => { const s = (${readTourState})(); return s && s.ringFits ? s : false; })()`, null, { timeout })
    .then((handle) => handle.jsonValue())
    .catch(() => null);
  return fitted ?? tourState(page);
}

// Walks the whole tour by keyboard (→ each step, Enter on the last), and
// checks that no step was skipped: every step's element is on the page,
// ringed, and its sentence is short. Returns the targets in order.
async function walkTour(page, warnings, wantCount) {
  const first = await expectStep(page, 1);
  if (wantCount !== undefined && first.count !== wantCount) {
    throw new Error(`the tour should have ${wantCount} steps, has ${first.count}`);
  }
  const targets = [];
  for (let i = 1; i <= first.count; i++) {
    const s = await expectStep(page, i).catch((e) => {
      const skipped = warnings.filter((w) => w.includes('nansense tour'));
      throw new Error(`${e.message}${skipped.length ? `; ${skipped.join('; ')}` : ''}`);
    });
    if (!s.drawn) throw new Error(`step ${i}: [data-tour="${s.target}"] is not on the page`);
    if (!s.ringFits) throw new Error(`step ${i}: the ring is not around [data-tour="${s.target}"]`);
    if (s.text.length === 0 || s.text.length >= 100) throw new Error(`step ${i}: "${s.text}" should be one short sentence (< 100 characters)`);
    targets.push(s.target);
    await page.keyboard.press(i === first.count ? 'Enter' : 'ArrowRight');
  }
  await h.gone('tour-box');
  const skipped = warnings.filter((w) => w.includes('nansense tour'));
  if (skipped.length) throw new Error(`steps were skipped: ${skipped.join('; ')}`);
  return targets;
}

function collectWarnings(page) {
  const warnings = [];
  page.on('console', (m) => {
    if (m.type() === 'warning') warnings.push(m.text());
  });
  return warnings;
}

// Makes the page see a locked session: `locked: true` in every status it
// gets, fetched or pushed.
async function fakeLocked(page) {
  await page.route('**/api/status', async (route) => {
    const res = await route.fetch();
    const body = await res.json();
    await route.fulfill({ response: res, json: { ...body, locked: true } });
  });
  await page.routeWebSocket(/\/ws(\?|$)/, (ws) => {
    const server = ws.connectToServer();
    server.onMessage((m) => {
      if (typeof m === 'string') {
        try {
          const msg = JSON.parse(m);
          if (msg.type === 'status' && msg.status) {
            ws.send(JSON.stringify({ ...msg, status: { ...msg.status, locked: true } }));
            return;
          }
        } catch {
          // Not JSON: passed on as it is.
        }
      }
      ws.send(m);
    });
    ws.onMessage((m) => server.send(m));
  });
}

const readClipboard = (page) => page.evaluate(() => navigator.clipboard.readText());

async function copyAndCheck(page, id, want) {
  const link = await byTestId(`share-${id}-link`).inputValue();
  if (link !== want) throw new Error(`the ${id} link should be ${want}, is ${link}`);
  await page.evaluate(() => navigator.clipboard.writeText('(nothing yet)'));
  await byTestId(`share-${id}-copy`).click();
  await expectText(`share-${id}-copy`, 'Copied ✓');
  const copied = await readClipboard(page);
  if (copied !== want) throw new Error(`Copy on ${id} put "${copied}" on the clipboard, not ${want}`);
}

async function main() {
  await h.startDemo(['--epochs', '1', '--limit-batches', '5']);
  const base = h.demo.base;
  await h.launch();
  const newPage = () =>
    h.browser.newPage({ viewport: { width: 1440, height: 1000 }, permissions: ['clipboard-read', 'clipboard-write'] });

  let page = (h.page = await newPage());
  let errors = collectConsoleErrors(page);
  let warnings = collectWarnings(page);
  await page.goto(base);

  await check('an unlocked session does not start the tour by itself', async () => {
    await page.locator('[data-tour="card"]').first().waitFor({ timeout: h.uiTimeoutMs });
    await settle(page);
    if ((await byTestId('tour-box').count()) !== 0) throw new Error('the tour opened on an unlocked session');
    const seen = await page.evaluate(() => localStorage.getItem('nansense.tourSeen'));
    if (seen !== null) throw new Error(`the tour was marked seen: ${seen}`);
  });

  await check('? on the main page replays its tour: every step’s element is there, → steps, Enter finishes', async () => {
    await byTestId('tour-replay').click();
    const s = await expectStep(page, 1);
    if (!s.focused) throw new Error('the tour box should take the focus, so the keys reach it');
    await screenshot('main-tour');
    const targets = await walkTour(page, warnings, 11);
    for (const t of ['step-controls', 'graph', 'card', 'card-links', 'input', 'stats-link', 'share', 'tour']) {
      if (!targets.includes(t)) throw new Error(`the main tour should point at ${t}: ${targets.join(', ')}`);
    }
  });

  await check('← goes back, Back and Next buttons step, Esc closes mid-tour', async () => {
    await byTestId('tour-replay').click();
    await expectStep(page, 1);
    await page.keyboard.press('ArrowRight');
    await page.keyboard.press('ArrowRight');
    await expectStep(page, 3);
    await page.keyboard.press('ArrowLeft');
    await expectStep(page, 2);
    await byTestId('tour-next').click();
    await expectStep(page, 3);
    await byTestId('tour-back').click();
    await expectStep(page, 2);
    await page.keyboard.press('Escape');
    await h.gone('tour-box');
  });

  await check('the tour never blocks the page: Step works while it is open', async () => {
    await byTestId('tour-replay').click();
    await expectStep(page, 1);
    const before = await byTestId('position-label').textContent();
    await byTestId('step').click();
    await page.waitForFunction(
      (b) => document.querySelector('[data-testid="position-label"]')?.textContent !== b,
      before,
      { timeout: h.uiTimeoutMs },
    );
    await expectText('run-state', 'paused');
    if ((await byTestId('tour-box').count()) !== 1) throw new Error('the tour closed when the page was used');
    await byTestId('tour-close').click();
    await h.gone('tour-box');
  });

  await check('a step whose element is missing is skipped and reported in the console', async () => {
    // The probe controls hidden: the tour passes over them.
    await page.addStyleTag({ content: '[data-tour="probe"] { display: none !important; }' });
    const n = warnings.length;
    await byTestId('tour-replay').click();
    const s = await expectStep(page, 1);
    // One step fewer to press through: the hidden one is passed over.
    for (let i = 1; i < s.count - 1; i++) await page.keyboard.press('ArrowRight');
    await expectStep(page, s.count);
    const visited = await page.evaluate(() => document.querySelector('[data-testid="tour-box"]').dataset.target);
    if (visited !== 'tour') throw new Error(`the last step should be the ? button, is ${visited}`);
    const skipped = warnings.slice(n).filter((w) => w.includes('nansense tour') && w.includes('[data-tour="probe"]'));
    if (skipped.length !== 1) throw new Error(`the probe step should be reported once as skipped: ${warnings.slice(n).join('; ')}`);
    await page.keyboard.press('Escape');
    await h.gone('tour-box');
    await page.reload();
  });

  for (const [name, path, count, waitFor] of [
    ['Stats', '/stats', 8, 'stats-view'],
    ['Weights', `/weights?layer=${LAYER}`, 8, 'weights-strips'],
    ['Experiment', `/experiment?layer=${LAYER}`, 8, 'experiment-layer'],
  ]) {
    await check(`? on the ${name} page replays its tour; every step’s element is there`, async () => {
      warnings.length = 0;
      await page.goto(base + path);
      await page.locator(`[data-tour="${waitFor}"]`).first().waitFor({ timeout: h.uiTimeoutMs });
      await byTestId('tour-replay').click();
      await expectStep(page, 1);
      await screenshot(`${name.toLowerCase()}-tour`);
      await walkTour(page, warnings, count);
    });
  }

  await check('Share on an unlocked session: this page’s link with its state and the library, no playground', async () => {
    await page.goto(`${base}/weights?layer=${LAYER}`);
    await byTestId('weights-layer').waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('share').click();
    await byTestId('share-dialog').waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('share-page').waitFor({ timeout: h.uiTimeoutMs });
    if ((await byTestId('share-playground').count()) !== 0) throw new Error('an unlocked session offers a playground link');
    await copyAndCheck(page, 'page', `${base}/weights?layer=${LAYER}`);
    await screenshot('share-unlocked');
    await byTestId('share-target-library').click();
    await copyAndCheck(page, 'library', 'https://pypi.org/project/nansense/');
    await page.keyboard.press('Escape');
    await h.gone('share-dialog');
  });

  await check('the shared link keeps the page’s state: the Stats view and the Experiment layer', async () => {
    await page.goto(`${base}/stats`);
    await byTestId('view-graphs').check();
    await byTestId('share').click();
    const stats = await byTestId('share-page-link').inputValue();
    if (new URL(stats).searchParams.get('view') !== 'graphs') throw new Error(`the Stats link lost its view: ${stats}`);
    await byTestId('share-close').click();
    await page.goto(`${base}/experiment?layer=${LAYER}`);
    await byTestId('experiment-layer').selectOption('features.0');
    await byTestId('share').click();
    const exp = await byTestId('share-page-link').inputValue();
    if (new URL(exp).searchParams.get('layer') !== 'features.0') throw new Error(`the Experiment link lost its layer: ${exp}`);
    await byTestId('share-close').click();
  });

  await check('the main page’s link names the cards shown, and opens them', async () => {
    await page.goto(base);
    await byTestId(`card-${LAYER}`).waitFor({ timeout: h.uiTimeoutMs });
    const shown = await page.evaluate(() => [...document.querySelectorAll('[data-tour="card"]')].map((c) => c.dataset.layer));
    await byTestId(`hide-${LAYER}`).click();
    await h.gone(`card-${LAYER}`);
    await byTestId('share').click();
    const want = shown.filter((l) => l !== LAYER);
    const link = await byTestId('share-page-link').inputValue();
    const layers = new URL(link).searchParams.get('layer')?.split(',');
    if (JSON.stringify(layers) !== JSON.stringify(want)) throw new Error(`the link should name ${want.join(',')}: ${link}`);
    await copyAndCheck(page, 'page', link);
    await byTestId('share-close').click();
    const other = await newPage();
    try {
      await other.goto(link);
      await other.getByTestId(`card-${want[want.length - 1]}`).waitFor({ timeout: h.uiTimeoutMs });
      const opened = await other.evaluate(() => [...document.querySelectorAll('[data-tour="card"]')].map((c) => c.dataset.layer));
      if (JSON.stringify(opened) !== JSON.stringify(want)) throw new Error(`the link opened ${opened.join(',')}, not ${want.join(',')}`);
    } finally {
      await other.close();
    }
  });

  await check('no console errors on the unlocked pages', async () => {
    if (errors.length) throw new Error(errors.join('; '));
  });
  await page.close();

  // A fresh browser context: nothing remembered.
  page = h.page = await newPage();
  errors = collectConsoleErrors(page);
  warnings = collectWarnings(page);
  await fakeLocked(page);

  await check('a locked session starts the main tour by itself, without the run controls', async () => {
    await page.goto(base);
    const s = await expectStep(page, 1);
    if (s.target === 'step-controls') throw new Error('the locked tour points at the run controls');
    await screenshot('locked-auto-tour');
    const targets = await walkTour(page, warnings, 8);
    for (const t of ['step-controls', 'position', 'settings']) {
      if (targets.includes(t)) throw new Error(`the locked tour should leave out ${t}: ${targets.join(', ')}`);
    }
    // The probe is the visitor's own on a locked session: its step stays.
    if (!targets.includes('probe')) throw new Error(`the locked tour should show the probe: ${targets.join(', ')}`);
    const seen = await page.evaluate(() => JSON.parse(localStorage.getItem('nansense.tourSeen') ?? '{}'));
    if (seen.main !== true) throw new Error(`the main tour was not remembered as seen: ${JSON.stringify(seen)}`);
  });

  await check('…once: a reload does not start it again, ? still replays it', async () => {
    await page.reload();
    await page.locator('[data-tour="card"]').first().waitFor({ timeout: h.uiTimeoutMs });
    await settle(page);
    if ((await byTestId('tour-box').count()) !== 0) throw new Error('the tour started again after a reload');
    await byTestId('tour-replay').click();
    await expectStep(page, 1);
    await page.keyboard.press('Escape');
    await h.gone('tour-box');
  });

  await check('each page has its own first time: the Stats page starts its tour by itself', async () => {
    await page.goto(`${base}/stats`);
    await expectStep(page, 1);
    await page.keyboard.press('Escape');
    await h.gone('tour-box');
  });

  await check('Share on a locked session offers the playground link, and copies it', async () => {
    await byTestId('share').click();
    await byTestId('share-playground').waitFor({ timeout: h.uiTimeoutMs });
    await copyAndCheck(page, 'playground', `${base}/`);
    await screenshot('share-locked');
    await byTestId('share-close').click();
    await h.gone('share-dialog');
  });

  await check('no console errors on the locked pages', async () => {
    if (errors.length) throw new Error(errors.join('; '));
  });
}

await h.run(main);
