// A synthetic network of many layers (200 by default) with skip connections,
// served to a page by intercepting the JSON views; every strip gets one real
// picture from the demo so the images are genuine PNGs of a known size. Used
// by ui_test.mjs, groups_test.mjs and bench/ui_scroll.mjs; fakeNaN serves a
// numerical error standing on it.

// Routes /api/architecture, /api/snapshot and /api/render/strip of `page` to
// the synthetic network, against the demo at `base`. Returns the layer names
// in order (names[0] is the input), the architecture served, and renders(),
// the number of strips the page has fetched over HTTP so far. With shapeOps,
// every fifth layer (from the third) is a pure shape op (a view) and the
// eighth is a module's second call ("...#2"), as a transformer has them.
// With nested, layer i is "s<i/100>.b<i/10%10>.l<i%10>.conv": modules three
// deep, as a 1,000-layer network has them. With given (a list of names,
// the input first), those names in a chain (skips as above).
export async function fakeManyLayers(page, base, count = 200, { shapeOps = false, nested = false, given = null } = {}) {
  if (given) count = given.length;
  const architecture = await (await fetch(`${base}/api/architecture`)).json();
  const realLayer = architecture.layers.find((l) => l.output_shape.length === 4 && l.role !== 'input');
  const real = await fetch(`${base}/api/render/strip?layer=${encodeURIComponent(realLayer.name)}&kind=activation`);
  const png = Buffer.from(await real.arrayBuffer());
  const info = JSON.parse(real.headers.get('X-Nansense-Render'));
  const shape = realLayer.output_shape;
  const isShapeOp = (i) => shapeOps && i % 5 === 2;
  const names = Array.from({ length: count }, (_, i) =>
    given
      ? given[i]
      : i === 0
      ? 'x'
      : nested
        ? `s${Math.floor(i / 100)}.b${Math.floor(i / 10) % 10}.l${i % 10}.conv`
        : isShapeOp(i)
        ? `view_${i}`
        : `stage${Math.floor(i / 10)}.block${i % 10}.conv${shapeOps && i === 8 ? '#2' : ''}`,
  );
  const layers = names.map((name, i) => ({
    name,
    role: i === 0 ? 'input' : i % 3 === 0 || isShapeOp(i) ? 'op' : 'module',
    kind: i === 0 ? 'input' : isShapeOp(i) ? 'view' : i % 3 === 0 ? 'add' : 'Conv2d',
    module: '',
    ops: [],
    output_shape: shape,
    dtype: 'float32',
    parameters: [],
    description: '',
    shape_op: isShapeOp(i),
  }));
  const edges = [];
  for (let i = 1; i < count; i++) {
    edges.push({ from: names[i - 1], to: names[i] });
    if (i % 3 === 0 && i >= 3) edges.push({ from: names[i - 3], to: names[i] });
  }
  const numel = shape.reduce((a, b) => a * b, 1);
  const summary = { shape, dtype: 'float32', numel, n: numel, nan: 0, pos_inf: 0, neg_inf: 0, min: -1, max: 1, mean: 0 };

  let renders = 0;
  await page.route('**/api/architecture', async (route) => {
    const res = await route.fetch();
    await route.fulfill({ response: res, json: { ...(await res.json()), layers, edges, inputs: ['x'] } });
  });
  await page.route('**/api/snapshot', async (route) => {
    const res = await route.fetch();
    const snap = await res.json();
    const fake = layers.map((l, i) => ({ name: l.name, kind: l.kind, activation: summary, gradient: i === 0 ? null : summary }));
    await route.fulfill({ response: res, json: { ...snap, layers: fake } });
  });
  await page.route('**/api/render/strip?*', async (route) => {
    renders += 1;
    const q = new URL(route.request().url()).searchParams;
    const header = JSON.stringify({ ...info, layer: q.get('layer'), kind: q.get('kind'), sample: Number(q.get('sample')) });
    await route.fulfill({ status: 200, body: png, headers: { 'Content-Type': 'image/png', 'X-Nansense-Render': header } });
  });
  return { names, layers, edges, renders: () => renders };
}

// Layer menu -> Show all, then waits until the last layer's card is there.
export async function showAllLayers(page, names, timeout) {
  await page.getByTestId('layer-menu').click();
  await page.getByTestId('show-all').click();
  await page.keyboard.press('Escape');
  await page.getByTestId(`card-${names.at(-1)}`).waitFor({ state: 'attached', timeout });
}

// Serves `page` a numerical error standing on the synthetic network: the
// status pushed over /ws and /api/debug name `producer` (an `op` in the
// forward pass) and the layers `others` as holding NaNs, as the demo at
// `demo` would report them. `update`/`skipRefused`: the error's held update
// and why skipping it is refused (a distributed run's).
export async function fakeNaN(page, demo, producer, others, op = 'aten::div', { update = null, skipRefused = null } = {}) {
  const status = await demo.api('/api/status');
  const row = (layer) => ({ layer, nan: 0.5, inf: 0, underflow: 0, overflow: 0, dtype: 'float32', sources: ['activation'] });
  const rows = [row(producer), ...others.map(row)];
  const summary = {
    reasons: ['nan'], reason_labels: ['NaN'], position: status.live_position, text: '', layers: rows.map((r) => r.layer),
    root_cause_status: 'found', producer: { op, pass: 'forward', layer: producer }, capsule: null, hits: 1,
    update, skip_update: false, skip_refused: skipRefused,
  };
  const error = {
    position: status.live_position, reasons: ['nan'], reason_labels: ['NaN'], checks_used: ['nan_inf'], layers: rows, bands: [],
    root_cause: { status: 'found', summary: '', producer: null, propagators: [], propagator_count: 0 },
    capsule: null, hits: 1, update, text: '',
  };
  await page.routeWebSocket(/\/ws$/, (ws) => {
    ws.send(JSON.stringify({ type: 'status', status: { ...status, debug: { enabled: true, checks: ['nan_inf'], error: summary } } }));
  });
  await page.route('**/api/debug', (route) =>
    route.fulfill({ json: { settings: {}, error, checked_batches: 1, skip_update: false, skip_refused: skipRefused } }),
  );
}
