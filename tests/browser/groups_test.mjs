// The diagram's module groups against synthetic 200- and 1,000-layer
// networks (many_layers.mjs) served by the demo; run by groups.sh. The first
// failure stops the run; every wait is Playwright's polling or a deadline.
import { Harness, collectConsoleErrors } from './harness.mjs';
import { fakeManyLayers, fakeNaN } from './many_layers.mjs';

const h = new Harness('groups', { uiTimeoutMs: 30_000 });
const { byTestId, screenshot, check } = h;
const UI_TIMEOUT_MS = h.uiTimeoutMs;
const FIT = 45; // groups.ts FIT_NODES: "about 40"

const nodeCount = () => h.page.locator('[data-testid^="graph-node-"], [data-testid^="graph-group-"]:not([data-testid^="graph-group-open-"]):not([data-testid^="graph-group-close-"])').count();
const edgeCount = () => h.page.locator('[data-testid="graph"] path.edge').count();
const attached = (id) => byTestId(id).waitFor({ state: 'attached', timeout: UI_TIMEOUT_MS });

// Waits until the diagram has shown a layout `n` nodes big (the layout comes
// from a worker, after the store changed).
async function expectNodes(n) {
  try {
    await h.page.waitForFunction((want) => document.querySelector('[data-testid="graph"]')?.dataset.nodes === String(want), n, { timeout: UI_TIMEOUT_MS });
  } catch {
    const have = await byTestId('graph').getAttribute('data-nodes');
    throw new Error(`the diagram should show ${n} nodes, it shows ${have}`);
  }
}

// The edges of the graph with each layer drawn as `drawnAs(layer)`, each
// once and none inside one node: worked out here independently of the page.
function aggregated(edges, drawnAs) {
  const out = new Set();
  for (const e of edges) {
    const a = drawnAs(e.from);
    const b = drawnAs(e.to);
    if (a !== b) out.add(`${a}->${b}`);
  }
  return out.size;
}

async function main() {
  await h.startDemo(['--epochs', '1']);
  const base = h.demo.base;
  await h.launch();

  // ---- 200 layers: stage<k>.block<j>.conv, 20 stages of 10 ----
  let page = (h.page = await h.newPage());
  let errors = collectConsoleErrors(page, { uncaught: false });
  const small = await fakeManyLayers(page, base, 200);
  await page.goto(base);

  await check('200 layers open as their 20 stage groups and the input (about 40 nodes at most)', async () => {
    await attached('graph-group-stage19');
    await expectNodes(21);
    const nodes = await nodeCount();
    if (nodes > FIT || nodes !== 21) throw new Error(`${nodes} nodes drawn, expected 21`);
    const stage = (n) => (n === 'x' ? n : n.split('.')[0]);
    const want = aggregated(small.edges, stage);
    const have = await edgeCount();
    if (have !== want) throw new Error(`${have} edges drawn between the groups, the grouped graph has ${want}`);
    const count = await byTestId('graph-group-stage4').getAttribute('data-count');
    if (count !== '10') throw new Error(`stage4 says ${count} layers, it holds 10`);
    // Cards stay listed for layers in collapsed groups.
    await attached(`card-${small.names[1]}`);
    await screenshot('200-collapsed');
  });

  await check('a click opens a group: its layers and a box; the box header closes it', async () => {
    await byTestId('graph-group-stage3').click();
    await attached('graph-node-stage3.block7.conv');
    await expectNodes(30);
    const stage = (n) => (n === 'x' || n.startsWith('stage3.') ? n : n.split('.')[0]);
    const want = aggregated(small.edges, stage);
    const have = await edgeCount();
    if (have !== want) throw new Error(`${have} edges drawn with stage3 open, expected ${want}`);
    await attached('graph-group-close-stage3');
    await screenshot('200-stage3-open');
    await byTestId('graph-group-close-stage3').click();
    await attached('graph-group-stage3');
    await expectNodes(21);
  });

  await check('Enter on a focused group opens it, and the choice is remembered over a reload', async () => {
    await byTestId('graph-group-stage5').focus();
    await page.keyboard.press('Enter');
    await attached('graph-node-stage5.block2.conv');
    await page.reload();
    await attached('graph-node-stage5.block2.conv');
    await expectNodes(30);
    await byTestId('graph-group-close-stage5').focus();
    await page.keyboard.press('Enter');
    await attached('graph-group-stage5');
  });

  await check('search lists matches and Enter reveals the layer: its group opens, its card shows', async () => {
    const target = 'stage17.block4.conv';
    if (await page.locator(`[data-testid="graph-node-${target}"]`).count()) throw new Error(`${target} is drawn before the search`);
    await byTestId('graph-search').fill('17.block4');
    await attached(`graph-search-hit-${target}`);
    const hits = await page.locator('[data-testid^="graph-search-hit-"]').count();
    if (hits !== 1) throw new Error(`${hits} matches listed for "17.block4", expected 1`);
    await page.keyboard.press('Enter');
    await attached(`graph-node-${target}`);
    await page.locator(`[data-testid="graph-node-${target}"].shown`).waitFor({ timeout: UI_TIMEOUT_MS });
    await byTestId(`card-${target}`).waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    // Centred in the pane.
    const pane = await byTestId('graph').boundingBox();
    await h.page.waitForFunction(
      ([sel, cx, cy]) => {
        const r = document.querySelector(sel)?.getBoundingClientRect();
        return r != null && Math.abs(r.x + r.width / 2 - cx) < 40 && Math.abs(r.y + r.height / 2 - cy) < 40;
      },
      [`[data-testid="graph-node-${target}"]`, pane.x + pane.width / 2, pane.y + pane.height / 2],
      { timeout: UI_TIMEOUT_MS },
    ).catch(() => {
      throw new Error(`${target} was not centred in the diagram`);
    });
    await screenshot('200-search-revealed');
  });

  await check('expand all shows every layer; collapse goes back to the opening depth', async () => {
    await byTestId('graph-expand-all').click();
    await expectNodes(200);
    await byTestId('graph-collapse-all').click();
    await expectNodes(21);
    if (errors.length) throw new Error(`console errors: ${errors.join(' | ')}`);
  });
  await page.close();

  // ---- A GPT-2-shaped network: 12 blocks of op-level layers ----
  page = h.page = await h.newPage();
  errors = collectConsoleErrors(page, { uncaught: false });
  const block = (b) =>
    ['ln_1', 'attn.c_attn', 'attn.split', 'attn.sdpa', 'attn.c_proj', 'add', 'ln_2', 'mlp.c_fc', 'mlp.act', 'mlp.c_proj', 'add#2'].map(
      (l) => `transformer.h.${b}.${l}`,
    );
  const gpt = ['x', 'transformer.wte', 'transformer.wpe', 'transformer.add', ...Array.from({ length: 12 }, (_, b) => block(b)).flat(), 'transformer.ln_f', 'lm_head'];
  await fakeManyLayers(page, base, 0, { given: gpt });
  await page.goto(base);

  await check('a 12-block GPT-2 opens at its blocks, each a closed group', async () => {
    await attached('graph-group-transformer.h.11');
    // x, wte, wpe, add, 12 blocks, ln_f, lm_head; "transformer" and
    // "transformer.h" open around them.
    await expectNodes(18);
    await attached('graph-group-close-transformer');
    await attached('graph-group-close-transformer.h');
    const count = await byTestId('graph-group-transformer.h.3').getAttribute('data-count');
    if (count !== '11') throw new Error(`transformer.h.3 says ${count} layers, it holds 11`);
    // Opening a block shows its layers and its attn and mlp groups closed.
    await byTestId('graph-group-transformer.h.3').click();
    await attached('graph-group-transformer.h.3.attn');
    await attached('graph-group-transformer.h.3.mlp');
    await attached('graph-node-transformer.h.3.ln_2');
    await expectNodes(18 - 1 + 6);
    await screenshot('gpt2-block-open');
    if (errors.length) throw new Error(`console errors: ${errors.join(' | ')}`);
  });
  await page.close();

  // ---- 1,000 layers, three deep: s<a>.b<b>.l<c>.conv ----
  page = h.page = await h.newPage();
  errors = collectConsoleErrors(page, { uncaught: false });
  await page.addInitScript(() => localStorage.removeItem('nansense.groups'));
  const big = await fakeManyLayers(page, base, 1000, { nested: true });
  const producer = 's6.b4.l2.conv';
  await fakeNaN(page, h.demo, producer, ['s6.b4.l3.conv']);
  await page.goto(base);

  await check("1,000 layers open at about 40 nodes at most, with the NaN producer's groups opened", async () => {
    await attached(`graph-node-${producer}`);
    await page.locator(`[data-testid="graph-node-${producer}"][data-debug="producer"]`).waitFor({ timeout: UI_TIMEOUT_MS });
    // 10 top groups, s6 open (9 b-groups + s6.b4 open: 10 layers), the input.
    await expectNodes(1 + 9 + 9 + 10);
    const nodes = await nodeCount();
    if (nodes > FIT) throw new Error(`${nodes} nodes drawn, expected at most ${FIT}`);
    await attached('graph-group-close-s6.b4');
    await byTestId(`card-${producer}`).waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    await screenshot('1000-nan-producer');
  });

  await check("a collapsed group carries its producer's mark", async () => {
    // The header is above the view (the producer is centred): no pointer can reach it there.
    await byTestId('graph-group-close-s6').dispatchEvent('click');
    await page.locator('[data-testid="graph-group-s6"][data-debug="producer"]').waitFor({ timeout: UI_TIMEOUT_MS });
    await expectNodes(11);
    const top = (n) => (n === 'x' ? n : n.split('.')[0]);
    const want = aggregated(big.edges, top);
    const have = await edgeCount();
    if (have !== want) throw new Error(`${have} edges drawn between the top groups, expected ${want}`);
  });

  await check('search reveals a layer three groups deep', async () => {
    const target = 's8.b3.l5.conv';
    await byTestId('graph-search').fill('s8.b3.l5');
    await byTestId(`graph-search-hit-${target}`).click();
    await attached(`graph-node-${target}`);
    await attached('graph-group-close-s8');
    await attached('graph-group-close-s8.b3');
    await byTestId(`card-${target}`).waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
  });

  await check('expand all lays out and shows all 1,000 layers', async () => {
    await byTestId('graph-expand-all').click();
    await expectNodes(1000);
    const edges = Number(await byTestId('graph').getAttribute('data-edges'));
    if (edges !== big.edges.length) throw new Error(`${edges} edges laid out, the network has ${big.edges.length}`);
    // Only the nodes near the view are drawn (a few screens of them), and
    // the first layer is among them at the top.
    await page.locator('[data-testid="graph"][data-culled="true"]').waitFor({ timeout: UI_TIMEOUT_MS });
    await attached('graph-node-s0.b0.l1.conv');
    const drawn = await nodeCount();
    if (drawn >= 1000 || drawn < 10) throw new Error(`${drawn} of 1,000 nodes drawn, expected the few near the view`);
    const t = await page.evaluate(() => window.__nansenseGraph);
    console.log(`  1,000 nodes: layout in the worker ${t.workerMs.toFixed(0)} ms, shown ${t.shownMs.toFixed(0)} ms after asking, ${drawn} drawn near the view`);
    await screenshot('1000-expanded');
    if (errors.length) throw new Error(`console errors: ${errors.join(' | ')}`);
  });
}

await h.run(main);
