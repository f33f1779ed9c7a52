// Scrolling smoothness of the cards pane with 200 layers (see ui_scroll.sh).
// The page gets the synthetic 200-layer network of tests/browser/
// many_layers.mjs with every card shown, then the pane is scrolled from top
// to bottom by mouse wheel events while the page records the timestamp of
// every animation frame; strips load lazily as their cards come into view.
// Headless Chromium produces frames at 60 Hz, so a median frame interval
// near 16.7 ms means no dropped frames. Prints numbers only: no timed
// assertion.
import { Demo, freePort, launchBrowser } from '../tests/browser/harness.mjs';
import { fakeManyLayers, showAllLayers } from '../tests/browser/many_layers.mjs';

const [binary, stepArg] = process.argv.slice(2);
const STEP_PX = Number(stepArg ?? 100);
const COUNT = 200;
const TIMEOUT_MS = 30_000;
// 60 fps, with slack for the timer's jitter; a dropped frame doubles an interval.
const FRAME_MS = 1000 / 60;
const MEDIAN_TARGET_MS = FRAME_MS + 1.5;

const demo = new Demo(binary);
let browser;
process.on('exit', () => demo.kill());

try {
  await demo.start(await freePort(), ['--epochs', '1']);
  browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const { names, renders } = await fakeManyLayers(page, demo.base, COUNT);
  await page.goto(demo.base + '/');
  await page.getByTestId(`graph-node-${names.at(-1)}`).waitFor({ state: 'attached', timeout: TIMEOUT_MS });
  await showAllLayers(page, names, TIMEOUT_MS);
  await page.locator('body[data-rendered-sequence]').waitFor({ state: 'attached', timeout: TIMEOUT_MS });
  const cards = await page.locator('[data-testid^="card-"]').count();
  if (cards !== COUNT) throw new Error(`${cards} cards after Show all, expected ${COUNT}`);

  const pane = page.getByTestId('cards');
  const box = await pane.boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  const extent = () => pane.evaluate((el) => ({ top: el.scrollTop, max: el.scrollHeight - el.clientHeight }));
  const start = await extent();
  if (start.max <= 0) throw new Error('the cards pane does not scroll');
  const rendersBefore = renders();

  // Every frame's timestamp, until __frames.stop is set.
  await page.evaluate(() => {
    const frames = [];
    window.__frames = frames;
    const tick = (t) => {
      frames.push(t);
      if (!frames.stop) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  const began = Date.now();
  let wheels = 0;
  const maxWheels = Math.ceil(start.max / STEP_PX) * 4 + 50;
  for (let at = start; at.top < at.max - 1; ) {
    if (wheels >= maxWheels) throw new Error(`${wheels} wheel steps scrolled only ${at.top} of ${at.max} px`);
    for (let i = 0; i < 10; ++i, ++wheels) await page.mouse.wheel(0, STEP_PX);
    const next = await extent();
    if (wheels === 10 && next.top === at.top) throw new Error('the wheel does not scroll the cards pane');
    at = next;
  }
  // The last strips, fetched as the bottom came into view, drawn.
  await page.waitForFunction(
    (sel) => document.querySelector(sel)?.dataset.drawn !== undefined,
    `[data-testid="strip-activation-${names.at(-1)}"]`,
    { timeout: TIMEOUT_MS },
  );
  const scrollMs = Date.now() - began;
  const frames = await page.evaluate(() => {
    window.__frames.stop = true;
    return window.__frames.slice();
  });
  const end = await extent();

  const intervals = frames.slice(1).map((t, i) => t - frames[i]);
  const sorted = [...intervals].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  const span = frames.at(-1) - frames[0];
  const slow = intervals.filter((d) => d > 20).length;
  const fps = (intervals.length * 1000) / span;
  const ms = (v) => `${v.toFixed(1)} ms`;
  console.log(
    `ui_scroll: ${COUNT} layers, every card shown; ${wheels} wheel steps of ${STEP_PX} px scrolled ` +
      `${Math.round(end.top - start.top)} px in ${(scrollMs / 1000).toFixed(1)} s; ` +
      `${renders() - rendersBefore} strips fetched lazily on the way (${rendersBefore} before)`,
  );
  console.log(
    `  frames ${frames.length}: median interval ${ms(at(0.5))}, p90 ${ms(at(0.9))}, p99 ${ms(at(0.99))}, ` +
      `max ${ms(sorted.at(-1))}; over 20 ms: ${slow}/${intervals.length} (${((100 * slow) / intervals.length).toFixed(1)}%); ` +
      `~${fps.toFixed(1)} fps`,
  );
  console.log(
    `  target 60 fps (median interval <= ${MEDIAN_TARGET_MS.toFixed(1)} ms): ${at(0.5) <= MEDIAN_TARGET_MS ? 'met' : 'NOT met'}`,
  );
} finally {
  if (browser) await browser.close();
  await demo.kill();
}
