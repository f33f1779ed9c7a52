// Laying out the diagram of a synthetic 1,000-layer network (see
// ui_layout.sh): s<a>.b<b>.l<c>.conv, modules three deep, from
// tests/browser/many_layers.mjs. Times the first view (at the opening depth)
// and every group opened ("expand all", 1,000 nodes) from the click to the
// frame after the nodes were rendered, as the page records it
// (window.__nansenseGraph: grouping, the layout worker, the render), and the longest main-thread task meanwhile
// (PerformanceObserver "longtask": over 50 ms blocks input). Prints numbers;
// the target (< 1 s to show 1,000 nodes) is reported, not asserted. Above
// 300 nodes the diagram draws only the nodes near the view (the count drawn
// is printed); panning moves that window.
import { Demo, freePort, launchBrowser } from '../tests/browser/harness.mjs';
import { fakeManyLayers } from '../tests/browser/many_layers.mjs';
import { summary } from './ui_common.mjs';

const [binary, roundsArg] = process.argv.slice(2);
const ROUNDS = Number(roundsArg ?? 5);
const COUNT = 1000;
const TIMEOUT_MS = 60_000;
const TARGET_MS = 1000;

const demo = new Demo(binary);
let browser;
process.on('exit', () => demo.kill());

const nodesShown = (page, n) =>
  page.waitForFunction((want) => document.querySelector('[data-testid="graph"]')?.dataset.nodes === String(want), n, { timeout: TIMEOUT_MS });

// Runs `action` with a longtask observer on; resolves with the layout the
// page recorded and the longest main-thread task in that time.
async function timed(page, action, nodes) {
  await page.evaluate(() => {
    window.__longTasks = [];
    window.__longObserver?.disconnect();
    window.__longObserver = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__longTasks.push(e.duration);
    });
    window.__longObserver.observe({ type: 'longtask' });
    window.__graphCountBefore = window.__nansenseGraph?.count ?? 0;
  });
  await action();
  await nodesShown(page, nodes);
  await page.waitForFunction(() => (window.__nansenseGraph?.count ?? 0) > window.__graphCountBefore, null, { timeout: TIMEOUT_MS });
  return page.evaluate(() => {
    window.__longObserver.disconnect();
    const g = window.__nansenseGraph;
    return { shownMs: g.shownAt - window.__clickAt, workerMs: g.workerMs, nodes: g.nodes, drawn: document.querySelectorAll('[data-testid^="graph-node-"]').length, longest: Math.max(0, ...window.__longTasks), longTasks: window.__longTasks.length };
  });
}

// A click from inside the page, timed from the moment it is dispatched.
const click = (page, id) =>
  page.evaluate((sel) => {
    window.__clickAt = performance.now();
    document.querySelector(sel).dispatchEvent(new MouseEvent('click', { bubbles: true }));
  }, `[data-testid="${id}"]`);

try {
  await demo.start(await freePort(), ['--epochs', '1']);
  browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  await fakeManyLayers(page, demo.base, COUNT, { nested: true });
  await page.goto(demo.base + '/');
  await page.getByTestId('graph-group-s9').waitFor({ state: 'attached', timeout: TIMEOUT_MS });
  const first = await page.evaluate(() => window.__nansenseGraph);
  const opening = [];
  const expanded = [];
  const worker = [];
  const longest = [];
  let drawn = 0;
  for (let i = 0; i < ROUNDS; i++) {
    const all = await timed(page, () => click(page, 'graph-expand-all'), COUNT);
    expanded.push(Math.round(all.shownMs));
    drawn = all.drawn;
    worker.push(Math.round(all.workerMs));
    longest.push(Math.round(all.longest));
    const back = await timed(page, () => click(page, 'graph-collapse-all'), first.nodes);
    opening.push(Math.round(back.shownMs));
    longest.push(Math.round(back.longest));
  }
  const shown = summary(expanded);
  console.log(`ui_layout: ${COUNT} layers in ${first.nodes} nodes at the opening depth; first view ${Math.round(first.shownMs)} ms after asking`);
  console.log(`  opening depth (${first.nodes} nodes), ${ROUNDS} times: ${summary(opening).text}`);
  console.log(`  every group open (${COUNT} nodes, ${drawn} drawn near the view), ${ROUNDS} times: ${shown.text}`);
  console.log(`    of which the layout worker: ${summary(worker).text}`);
  console.log(`  longest main-thread task meanwhile: ${summary(longest).text} (the layout itself runs in the worker)`);
  console.log(`  target ${COUNT} nodes shown < ${TARGET_MS} ms (median): ${shown.median < TARGET_MS ? 'met' : 'NOT met'}`);
} finally {
  if (browser) await browser.close();
  await demo.kill();
}
