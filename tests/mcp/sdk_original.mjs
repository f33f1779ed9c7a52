// The original's MCP contract, through the official MCP TypeScript SDK
// against a running demo (two epochs of 4 batches per phase):
//   1. tools/list holds every one of the original's 45 tools, each with the
//      original's arguments, optional where the original's are, with the
//      original's defaults (the table below is the original's signatures,
//      nansense/mcp_server.py);
//   2. every tool called with the original's argument shapes (only the
//      arguments its docs name, defaults left out) answers without an error,
//      in the documented shape.
// Usage: node sdk_original.mjs URL
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.argv[2];
const deadline = setTimeout(() => fail('timed out after 240 s'), 240_000);

function fail(message) {
  console.log(`FAIL sdk_original: ${message}`);
  process.exit(1);
}
function check(condition, message, detail) {
  if (!condition) fail(`${message}${detail === undefined ? '' : ` (got ${JSON.stringify(detail).slice(0, 600)})`}`);
  console.log(`PASS sdk_original: ${message}`);
}

// The original's tools: argument -> its default; R = required; null = an
// optional argument without a value (Python's None).
const R = Symbol('required');
const original = {
  get_status: {},
  get_architecture: { include_graph: true },
  get_layer_stats: { layers: R, include_histogram: false, channel: null },
  get_stats_history: { layer: R, phase: null },
  get_debug_report: {},
  get_weight_stats: { layer: R, parameters: null },
  get_metrics: { layers: null },
  get_settings: {},
  get_time_travel_status: {},
  get_probe_status: {},
  list_experiments: {},
  get_experiment_result: { seq: R },
  list_recordings: {},
  render_layer: { layers: R, sample: 0, include_input: false, average: false, values: 'unchanged' },
  render_input: { sample: 0, input_name: null },
  // index=0: ours leaves it out for every Index dimension at 0 (the same picture).
  render_weights: { layer: R, parameters: null, index: null, x_dim: null, y_dim: null, tile_dim: null },
  render_histogram: { layers: R, phase: null, log_x: false, log_y: false, channel: null },
  render_extreme_patches: { layer: R, phase: null, grids: null, heatmap: false },
  // channel and value are required there; ours takes the whole layer without
  // channel, and a bin index instead of value (one of the two is required).
  render_bin_samples: { layer: R, channel: null, value: null, kind: 'activation', count: 4 },
  render_experiment: { seq: R, overlay: false },
  step: { unit: 'batch', timeout_seconds: 30 },
  run: { detach: false, timeout_seconds: 30 },
  run_until: { phase: R, epoch: R, batch: R, timeout_seconds: 30 },
  pause: { timeout_seconds: 30 },
  refresh: { timeout_seconds: 10 },
  time_travel: { epoch: R, timeout_seconds: 30 },
  watch_layers: { layers: R },
  unwatch_layers: { layers: R },
  set_stats_scope: { scope: R },
  configure_debug_checks: {
    enabled: null, interval_batches: null, check_nan_inf: null, check_under_over: null, threshold_fraction: null,
  },
  // category is required there; ours silences the standing error's categories without it.
  silence_debug_check: { category: null },
  set_update_frequency: { unit: 'epoch', n: 1, phase: null },
  set_watch_performance: { channel_limit_enabled: null, channel_limit: null, samples_per_channel: null, average_patches: null },
  set_auto_run_experiments: { enabled: R },
  pin_batch: { timeout_seconds: 10 },
  unpin_batch: { timeout_seconds: 10 },
  set_probe_mode: { mode: R, timeout_seconds: 10 },
  add_perturbation: { index: R, values: R, sample: 0, input_name: null, timeout_seconds: 10 },
  clear_perturbations: { timeout_seconds: 10 },
  run_experiment: { kind: R, layer: R, params: null, timeout_seconds: 120, video: false },
  cancel_experiment: { seq: null },
  start_recording: {
    view: R, layers: null, layer: null, phase: null, sample: 0, heatmap: false, log_x: false, log_y: false,
    kind: null, params: null, overlay: false, average: false, values: 'unchanged',
  },
  stop_recording: { key: null },
  discard_recording: { key: null },
  save_snapshot: {
    view: R, layers: null, layer: null, phase: null, sample: 0, heatmap: false, log_x: false, log_y: false,
    seq: null, overlay: false, average: false, values: 'unchanged',
  },
};

const called = new Set();
// Calls a tool and fails on any error (an argument error above all);
// returns the structured reply (or the JSON text) and the content.
async function call(client, name, args) {
  called.add(name);
  const result = await client.callTool({ name, arguments: args });
  const text = result.content.filter((c) => c.type === 'text').map((c) => c.text).join(' | ');
  if (result.isError) fail(`${name}(${JSON.stringify(args)}) is an error: ${text.slice(0, 600)}`);
  let body = result.structuredContent;
  if (body === undefined) {
    try {
      body = JSON.parse(result.content.find((c) => c.type === 'text').text);
    } catch {
      body = {};
    }
  }
  return { body, content: result.content, images: result.content.filter((c) => c.type === 'image') };
}
const isPosition = (p) => p && typeof p.epoch === 'number' && typeof p.batch_idx === 'number' && typeof p.phase === 'string';
const isStatus = (s) => ['paused', 'running', 'finished'].includes(s.state) && 'live_position' in s &&
  'snapshot_position' in s && typeof s.hint === 'string' && typeof s.mode === 'string';
const isPng = (r) => r.images.length > 0 && r.images.every((i) => i.mimeType === 'image/png' && i.data.length > 100);

try {
  const client = new Client({ name: 'nansense-original-contract', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);

  // --- 1. the tool list against the original's signatures ---
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  check(Object.keys(original).length === 45, "the table holds the original's 45 tools");
  for (const [name, args] of Object.entries(original)) {
    const tool = byName[name];
    if (!tool) fail(`tools/list lacks the original's ${name}`);
    const properties = tool.inputSchema.properties ?? {};
    const required = tool.inputSchema.required ?? [];
    for (const [arg, fallback] of Object.entries(args)) {
      const p = properties[arg];
      if (!p) fail(`${name} lacks the original's argument ${arg}; it takes ${Object.keys(properties)}`);
      if (fallback !== R && required.includes(arg)) fail(`${name}: ${arg} is required, the original's is optional`);
      if (fallback !== R && fallback !== null && JSON.stringify(p.default) !== JSON.stringify(fallback)) {
        fail(`${name}: ${arg} defaults to ${JSON.stringify(p.default)}, the original's to ${JSON.stringify(fallback)}`);
      }
    }
    // Our own required arguments are the original's required ones.
    for (const arg of required) {
      if (args[arg] !== R) fail(`${name}: ${arg} is required here but not in the original`);
    }
  }
  check(true, `tools/list: all 45 of the original's tools, arguments, optionality and defaults (${tools.length} tools in all)`);

  // --- 2. every tool with the original's argument shapes ---
  // Orientation.
  const status = (await call(client, 'get_status', {})).body;
  check(isStatus(status) && status.state === 'paused' && isPosition(status.live_position), 'get_status: paused, positions', status);
  const arch = (await call(client, 'get_architecture', {})).body;
  const names = arch.layers.map((l) => l.name);
  check(names.includes('features.0') && arch.edges.length > 0 && arch.mermaid.startsWith('flowchart TD') &&
        arch.inputs.length === 1, 'get_architecture: layers, edges and Mermaid source by default', Object.keys(arch));
  const bare = (await call(client, 'get_architecture', { include_graph: false })).body;
  check(bare.layers.length === names.length && !('edges' in bare) && !('mermaid' in bare),
        'get_architecture(include_graph=False): the layers without the graph', Object.keys(bare));
  const inputName = arch.inputs[0];

  // Settings and collection (the demo watches four layers, scope watched).
  const settings = (await call(client, 'get_settings', {})).body;
  check(typeof settings.stats_scope === 'string' && Array.isArray(settings.watched_layers) && 'update_frequency' in settings &&
        'auto_run_experiments' in settings && 'experiment_defaults' in settings, 'get_settings: the settings', settings);
  const frequency = (await call(client, 'set_update_frequency', {})).body;
  check(frequency.update_frequency.unit === 'epoch' && frequency.update_frequency.n === 1,
        "set_update_frequency(): the original's default, once an epoch", frequency.update_frequency);
  const batches = (await call(client, 'set_update_frequency', { unit: 'batch', n: 1, phase: 'train' })).body;
  check(batches.update_frequency.unit === 'batch' && batches.update_frequency.phase === 'train',
        'set_update_frequency(unit="batch", n=1, phase="train")', batches.update_frequency);
  const scope = (await call(client, 'set_stats_scope', { scope: 'watched' })).body;
  check(scope.stats_scope === 'watched', 'set_stats_scope("watched")', scope);
  const watched = (await call(client, 'watch_layers', { layers: ['features.1'] })).body;
  check(watched.watched_layers.includes('features.1'), 'watch_layers(["features.1"])', watched.watched_layers);
  const unwatched = (await call(client, 'unwatch_layers', { layers: ['features.1'] })).body;
  check(!unwatched.watched_layers.includes('features.1'), 'unwatch_layers(["features.1"])', unwatched.watched_layers);
  const performance = (await call(client, 'set_watch_performance', {
    channel_limit_enabled: true, channel_limit: 16, samples_per_channel: 5, average_patches: true,
  })).body;
  check(typeof performance.statistics_flushed === 'boolean' && performance.watch_performance.average_patches === true,
        'set_watch_performance(...): statistics_flushed said', performance);
  const auto = (await call(client, 'set_auto_run_experiments', { enabled: false })).body;
  check(auto.auto_run_experiments === false, 'set_auto_run_experiments(False)', auto);

  // The numerical checks.
  const report = (await call(client, 'get_debug_report', {})).body;
  check('settings' in report && 'error' in report, 'get_debug_report: settings and the standing error', Object.keys(report));
  const configured = (await call(client, 'configure_debug_checks', {
    enabled: true, interval_batches: 1, check_nan_inf: true, check_under_over: true, threshold_fraction: 0.1,
  })).body;
  check(configured.settings.interval_batches === 1, 'configure_debug_checks(interval_batches=1, ...)', configured.settings);
  const silenced = (await call(client, 'silence_debug_check', { category: 'under_over' })).body;
  check(silenced.settings.check_under_over === false, 'silence_debug_check("under_over")', silenced.settings);
  await call(client, 'configure_debug_checks', { check_under_over: true });

  // Run control: a batch, then a step with every argument.
  const stepped = (await call(client, 'step', {})).body;
  check(isStatus(stepped) && stepped.live_position.batch_idx === 1, 'step(): paused at batch 1', stepped.live_position);
  const stepped2 = (await call(client, 'step', { unit: 'batch', timeout_seconds: 60 })).body;
  check(stepped2.live_position.batch_idx === 2, 'step(unit="batch", timeout_seconds=60): batch 2', stepped2.live_position);
  const paused = (await call(client, 'pause', {})).body;
  check(isStatus(paused) && paused.state === 'paused', 'pause(): a no-op while paused', paused.state);
  const refreshed = (await call(client, 'refresh', {})).body;
  check(isStatus(refreshed) && refreshed.refreshed === false, 'refresh(): nothing newer while paused', refreshed);

  // Inspection.
  const stats = (await call(client, 'get_layer_stats', { layers: ['features.0'], include_histogram: true, channel: 0 })).body;
  const act = stats.layers[0].activation;
  check(act.numel > 0 && typeof act.mean === 'number' && act.histogram.pairs.length > 0 && 'dead_channels' in act,
        'get_layer_stats(["features.0"], include_histogram=True, channel=0)', act);
  const history = (await call(client, 'get_stats_history', { layer: 'features.0' })).body;
  check(history.layer === 'features.0' && history.phases.train?.length > 0, 'get_stats_history("features.0")', Object.keys(history));
  await call(client, 'get_stats_history', { layer: 'features.0', phase: 'train' });
  const weights = (await call(client, 'get_weight_stats', { layer: 'features.0' })).body;
  check(weights.parameters.length === 2 && weights.parameters[0].hyperparameters.lr > 0, 'get_weight_stats("features.0")',
        weights.parameters.map((p) => p.name));
  const weight = (await call(client, 'get_weight_stats', { layer: 'features.0', parameters: ['weight'] })).body;
  check(weight.parameters.length === 1, 'get_weight_stats("features.0", parameters=["weight"])', weight.parameters.length);
  const metrics = (await call(client, 'get_metrics', {})).body;
  check(Array.isArray(metrics.series) && Array.isArray(metrics.failed), 'get_metrics(): series and failed', Object.keys(metrics));
  await call(client, 'get_metrics', { layers: ['features.0'] });

  // Pictures.
  const layer = await call(client, 'render_layer', { layers: ['features.0'] });
  check(isPng(layer) && layer.images.length === 2 && layer.body.images.length === 2,
        'render_layer(["features.0"]): activation and gradient PNGs', layer.body);
  const withInput = await call(client, 'render_layer', {
    layers: ['features.0'], sample: 1, include_input: true, average: true, values: 'abs' });
  check(isPng(withInput) && withInput.images.length === 3 && withInput.body.input?.sample === 1 &&
        withInput.content[0].text.startsWith('input'),
        'render_layer(include_input=True, average=True, values="abs"): the input above both strips', withInput.body);
  const input = await call(client, 'render_input', {});
  check(isPng(input) && input.body.input === 0 && input.body.sample === 0, 'render_input()', input.body);
  const named = await call(client, 'render_input', { sample: 2, input_name: inputName });
  check(isPng(named) && named.body.name === inputName && named.body.sample === 2, `render_input(input_name="${inputName}")`, named.body);
  const kernels = await call(client, 'render_weights', { layer: 'features.0' });
  check(isPng(kernels) && kernels.body.parameters.length === 2, 'render_weights("features.0")', kernels.body.parameters);
  const channel3 = await call(client, 'render_weights', { layer: 'features.0', parameters: ['weight'], index: 3 });
  check(isPng(channel3) && channel3.body.images[0].layout.index[0] === 3,
        'render_weights(parameters=["weight"], index=3): output channel 3', channel3.body.images[0]);
  await call(client, 'render_weights', { layer: 'classifier.1', parameters: ['weight'], index: 0, x_dim: 1, y_dim: 0 });
  const histogram = await call(client, 'render_histogram', { layers: ['features.0'] });
  check(isPng(histogram) && Array.isArray(histogram.body.series), 'render_histogram(["features.0"])', histogram.body);
  await call(client, 'render_histogram', { layers: ['features.0'], phase: 'train', log_x: true, log_y: true, channel: 0 });
  const patches = await call(client, 'render_extreme_patches', { layer: 'features.0' });
  check(isPng(patches) && patches.body.grids.join() === 'max_pixel,min_pixel,max_average,min_average',
        'render_extreme_patches("features.0"): every grid collected (average_patches is on)', patches.body.grids);
  await call(client, 'render_extreme_patches', { layer: 'features.0', phase: 'train', grids: ['max_pixel'], heatmap: true });
  // A ReLU's zeros: the zero band, whatever the weights.
  const zeros = await call(client, 'render_bin_samples', { layer: 'features.1', channel: 0, value: 0 });
  check(isPng(zeros) && zeros.body.bin === 105, 'render_bin_samples("features.1", channel=0, value=0): the zero band', zeros.body);
  await call(client, 'render_bin_samples', { layer: 'features.1', channel: 1, value: 0.0, kind: 'activation', count: 2 });

  // Probes.
  const probe = (await call(client, 'get_probe_status', {})).body;
  check(probe.pinned === false && Array.isArray(probe.perturbations) && typeof probe.hint === 'string',
        'get_probe_status()', probe);
  const pinned = (await call(client, 'pin_batch', {})).body;
  check(pinned.pinned === true, 'pin_batch()', pinned);
  const mode = (await call(client, 'set_probe_mode', { mode: 'eval' })).body;
  check(mode.mode === 'eval', 'set_probe_mode("eval")', mode);
  const perturbed = (await call(client, 'add_perturbation', { index: [14, 14], values: [1.0] })).body;
  check(perturbed.perturbations.length === 1, 'add_perturbation(index=[14, 14], values=[1.0])', perturbed.perturbations);
  const perturbed2 = (await call(client, 'add_perturbation', {
    index: [3, 4], values: [0.5], sample: 1, input_name: inputName, timeout_seconds: 10 })).body;
  check(perturbed2.perturbations.length === 2 && perturbed2.perturbations[1].input === inputName,
        `add_perturbation(sample=1, input_name="${inputName}")`, perturbed2.perturbations);
  const cleared = (await call(client, 'clear_perturbations', {})).body;
  check(cleared.perturbations.length === 0, 'clear_perturbations()', cleared);
  await call(client, 'set_probe_mode', { mode: 'unchanged', timeout_seconds: 10 });
  const unpinned = (await call(client, 'unpin_batch', {})).body;
  check(unpinned.pinned === false && unpinned.active === false, 'unpin_batch(): the probe ends', unpinned);

  // Experiments.
  const kinds = (await call(client, 'list_experiments', {})).body;
  check(kinds.kinds.length === 5 && kinds.kinds.every((k) => Array.isArray(k.params) && Array.isArray(k.layers)),
        'list_experiments(): five kinds with params and layers', kinds.kinds.map((k) => k.kind));
  const cam = (await call(client, 'run_experiment', { kind: 'gradcam', layer: 'features.3', params: { batch: 2 } })).body;
  check(cam.stage === 'done' && typeof cam.seq === 'number' && typeof cam.params === 'object',
        'run_experiment("gradcam", "features.3", params={"batch": 2})', cam);
  const result = (await call(client, 'get_experiment_result', { seq: cam.seq })).body;
  check(result.seq === cam.seq && result.stage === 'done', 'get_experiment_result(seq)', result);
  const drawn = await call(client, 'render_experiment', { seq: cam.seq });
  check(isPng(drawn) && drawn.body.overlay === false, 'render_experiment(seq)', drawn.body);
  const over = await call(client, 'render_experiment', { seq: cam.seq, overlay: true });
  check(isPng(over) && over.body.overlay === true, 'render_experiment(seq, overlay=True)', over.body);
  const cancelled = (await call(client, 'cancel_experiment', {})).body;
  check(typeof cancelled.cancelled === 'number', 'cancel_experiment(): every one', cancelled);
  await call(client, 'cancel_experiment', { seq: cam.seq });

  // Recordings and snapshots, in the original's shapes: no layers for the
  // layers view (the watched layers), no seq for the experiment still (the newest).
  const recordings = (await call(client, 'list_recordings', {})).body;
  check(typeof recordings.directory === 'string' && Array.isArray(recordings.recordings), 'list_recordings()', recordings);
  const main = (await call(client, 'start_recording', { view: 'layers' })).body;
  check(main.key === 'main' && main.label.includes('features.0') && main.files.length === 1,
        'start_recording(view="layers"): the watched layers', main);
  const histograms = (await call(client, 'start_recording', { view: 'histograms', log_y: true })).body;
  check(histograms.key === 'watch_histogram' && histograms.label.includes('features.0'),
        'start_recording(view="histograms"): the layers with statistics', histograms);
  const minmax = (await call(client, 'start_recording', { view: 'patches', layers: ['features.0'], heatmap: true })).body;
  check(minmax.key === 'watch_minmax', 'start_recording(view="patches", layers=["features.0"])', minmax);
  const dream = (await call(client, 'start_recording', {
    view: 'experiment', layer: 'features.3', kind: 'gradcam', params: { batch: 2 }, overlay: true })).body;
  check(dream.key === 'experiment:features.3', 'start_recording(view="experiment", kind, layer, params, overlay=True)', dream);
  await call(client, 'start_recording', { view: 'weights', layer: 'features.0' });
  await call(client, 'step', {});
  const stopped = (await call(client, 'stop_recording', { key: 'main' })).body;
  check(stopped.stopped.length === 1 && stopped.files.length === 1 && stopped.files[0].endsWith('.mp4'),
        'stop_recording(key="main"): its file', stopped);
  const discarded = (await call(client, 'discard_recording', { key: 'watch_histogram' })).body;
  check(discarded.discarded.length === 1, 'discard_recording(key="watch_histogram")', discarded);
  const rest = (await call(client, 'stop_recording', {})).body;
  check(rest.stopped.length === 3 && rest.files.length >= 3, 'stop_recording(): every other one', rest);
  const none = (await call(client, 'discard_recording', {})).body;
  check(none.discarded.length === 0, 'discard_recording(): nothing left', none);
  const still = (await call(client, 'save_snapshot', { view: 'layers' })).body;
  check(still.files.length === 1 && still.files[0].endsWith('.png') && still.key === 'main',
        'save_snapshot(view="layers"): the watched layers as PNG', still);
  const newest = (await call(client, 'save_snapshot', { view: 'experiment' })).body;
  check(newest.files.length === 1 && newest.key === 'experiment:features.3', 'save_snapshot(view="experiment"): the newest result', newest);
  const bySeq = (await call(client, 'save_snapshot', { view: 'experiment', seq: cam.seq, overlay: true })).body;
  check(bySeq.files.length === 1 && bySeq.sequence === cam.seq, 'save_snapshot(view="experiment", seq, overlay=True)', bySeq);
  await call(client, 'save_snapshot', { view: 'weights', layer: 'features.0' });
  await call(client, 'save_snapshot', { view: 'histograms', layers: ['features.0'], phase: 'train', log_x: true });
  await call(client, 'save_snapshot', { view: 'patches', layers: ['features.0'], phase: 'train' });

  // Time travel: into epoch 1, then back to epoch 0's start.
  const until = (await call(client, 'run_until', { phase: 'train', epoch: 1, batch: 1 })).body;
  check(until.live_position.epoch === 1 && until.live_position.batch_idx === 1, 'run_until(phase="train", epoch=1, batch=1)',
        until.live_position);
  const travel = (await call(client, 'get_time_travel_status', {})).body;
  check(travel.available === true && travel.cached_epochs.includes(0), 'get_time_travel_status(): epoch 0 cached', travel);
  const back = (await call(client, 'time_travel', { epoch: 0 })).body;
  check(isStatus(back) && back.live_position.epoch === 0 && back.live_position.batch_idx === 0,
        'time_travel(epoch=0): paused at its first batch', back.live_position);
  const ran = (await call(client, 'run', { timeout_seconds: 120 })).body;
  check(isStatus(ran) && ran.state === 'paused' && ran.live_position.epoch === 1, 'run(): paused at the last batch',
        ran.live_position);
  const detached = (await call(client, 'run', { detach: true })).body;
  check(isStatus(detached), 'run(detach=True): returns at once', detached.state);

  const missed = Object.keys(original).filter((n) => !called.has(n));
  check(missed.length === 0, "every one of the original's tools was called", missed);
  await transport.terminateSession();
  await client.close();
  clearTimeout(deadline);
} catch (error) {
  fail(error?.stack ?? String(error));
}
