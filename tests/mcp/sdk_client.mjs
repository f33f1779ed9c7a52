// The official MCP TypeScript SDK's Streamable HTTP client against a running
// demo: connect, list tools, read status and architecture, step, get stats and
// a layer picture that decodes as PNG. Usage: node sdk_client.mjs URL
import { inflateSync } from 'node:zlib';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.argv[2];
const deadline = setTimeout(() => fail('timed out after 120 s'), 120_000);

function fail(message) {
  console.log(`FAIL sdk_client: ${message}`);
  process.exit(1);
}
function check(condition, message, detail) {
  if (!condition) fail(`${message}${detail === undefined ? '' : ` (got ${JSON.stringify(detail).slice(0, 400)})`}`);
  console.log(`PASS sdk_client: ${message}`);
}

// Width and height from the IHDR, after checking the signature, every chunk
// and that the inflated IDAT holds exactly one filtered row per line.
function decodePng(bytes) {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (!bytes.subarray(0, 8).equals(signature)) throw new Error('no PNG signature');
  let offset = 8;
  let width = 0, height = 0, channels = 0, depth = 0;
  const idat = [];
  while (offset < bytes.length) {
    const length = bytes.readUInt32BE(offset);
    const type = bytes.toString('ascii', offset + 4, offset + 8);
    const data = bytes.subarray(offset + 8, offset + 8 + length);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      depth = data[8];
      channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[data[9]];
    } else if (type === 'IDAT') {
      idat.push(data);
    } else if (type === 'IEND') {
      break;
    }
    offset += 12 + length;
  }
  if (!width || !height || depth !== 8 || !channels) throw new Error('unsupported or missing IHDR');
  const raw = inflateSync(Buffer.concat(idat));
  if (raw.length !== height * (1 + width * channels)) {
    throw new Error(`pixel data is ${raw.length} bytes, expected ${height * (1 + width * channels)}`);
  }
  return { width, height };
}

const json = (result) => JSON.parse(result.content.find((c) => c.type === 'text').text);

try {
  const client = new Client({ name: 'nansense-sdk-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  check(client.getServerVersion()?.name === 'nansense', 'initialize: server is nansense', client.getServerVersion());
  check(transport.sessionId && transport.sessionId.length >= 16, 'initialize: a session id was issued');
  check(client.getInstructions()?.includes('get_status'), 'initialize: instructions say where to start');

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const name of ['get_status', 'get_architecture', 'get_layer_stats', 'get_weight_stats', 'step', 'run',
                      'run_until', 'pause', 'refresh', 'render_layer', 'render_input', 'get_settings',
                      'set_update_frequency', 'set_stats_scope', 'watch_layers', 'unwatch_layers',
                      'set_watch_performance', 'list_stats', 'get_stats_history', 'get_metrics', 'render_histogram',
                      'render_weights', 'get_probe_status', 'pin_batch', 'unpin_batch', 'set_probe_mode',
                      'add_perturbation', 'clear_perturbations', 'render_extreme_patches', 'render_bin_samples',
                      'set_patch_layers']) {
    if (!names.includes(name)) fail(`tools/list lacks ${name}: ${names}`);
  }
  check(tools.every((t) => t.inputSchema?.type === 'object' && t.description.length > 40),
        `tools/list: ${tools.length} tools with schemas and descriptions`);

  const status = await client.callTool({ name: 'get_status', arguments: {} });
  check(!status.isError && status.structuredContent?.state === 'paused', 'get_status: paused', status.structuredContent);
  check(json(status).live_position.batch_idx === 0, 'get_status: at the first batch', json(status).live_position);

  const arch = json(await client.callTool({ name: 'get_architecture', arguments: {} }));
  const layers = arch.layers.map((l) => l.name);
  check(arch.captured && layers.includes('features.0'), 'get_architecture: layers traced', layers);

  const stepped = await client.callTool({ name: 'step', arguments: { unit: 'batch', timeout_seconds: 60 } });
  const after = json(stepped);
  check(after.state === 'paused' && after.live_position.batch_idx === 1, 'step: paused again at batch 1', after);

  const stats = json(await client.callTool({
    name: 'get_layer_stats', arguments: { layers: ['features.0'], include_histogram: true, bins: 16 } }));
  const act = stats.layers[0].activation;
  check(stats.position.batch_idx === 1 && act.n === act.numel && act.histogram.pairs.length > 0,
        'get_layer_stats: the new batch, finite, with a histogram', act);

  const weights = json(await client.callTool({ name: 'get_weight_stats', arguments: { layer: 'features.0' } }));
  check(weights.parameters.length > 0 && typeof weights.parameters[0].hyperparameters?.lr === 'number',
        'get_weight_stats: parameters with the learning rate', weights.parameters[0]);

  // Statistics over time: the demo watches its conv and linear layers and logs its loss.
  const settings = json(await client.callTool({ name: 'get_settings', arguments: {} }));
  check(settings.watched_layers.includes('features.0') && settings.stats_collecting &&
        settings.update_frequency.unit === 'seconds', 'get_settings: the demo watches its conv and linear layers',
        settings);
  const listed = json(await client.callTool({ name: 'list_stats', arguments: {} }));
  check(listed.layers.some((l) => l.layer === 'features.0') && listed.edges.length === 212,
        'list_stats: features.0 collected, 212 bin edges', listed.layers);
  const history = json(await client.callTool({
    name: 'get_stats_history', arguments: { layer: 'features.0', phase: 'train' } }));
  const epoch0 = history.phases.train?.[0];
  check(epoch0?.batches === 2 && epoch0.activation.n > 0 && epoch0.activation.hist.length === 211 &&
        epoch0.gradient !== null, 'get_stats_history: batches 0 and 1 folded, with histograms', epoch0);
  const metrics = json(await client.callTool({ name: 'get_metrics', arguments: {} }));
  const loss = metrics.series.find((s) => s.name === 'loss' && s.phase === 'train');
  check(loss?.points.length === 2 && loss.points[1].batch === 1, 'get_metrics: the loss of each batch', loss);
  const histogram = await client.callTool({ name: 'render_histogram', arguments: { layers: ['features.0'] } });
  const histogramImage = histogram.content.find((c) => c.type === 'image');
  const histogramSize = histogramImage && decodePng(Buffer.from(histogramImage.data, 'base64'));
  check(!histogram.isError && histogramSize && Math.max(histogramSize.width, histogramSize.height) <= 1568 &&
        histogram.content[0].text.includes('signed-log'), 'render_histogram: a PNG chart with its caption',
        histogram.content[0]);
  const patches = await client.callTool({
    name: 'render_extreme_patches', arguments: { layer: 'features.0', grids: ['max_pixel'], heatmap: true } });
  const patchImage = patches.content.find((c) => c.type === 'image');
  const patchSize = patchImage && decodePng(Buffer.from(patchImage.data, 'base64'));
  check(!patches.isError && patchSize && Math.max(patchSize.width, patchSize.height) <= 1568 &&
        patches.structuredContent?.channels === 16 && patches.structuredContent?.samples === 5,
        'render_extreme_patches: 16 channels x 5 inputs as one PNG', patches.structuredContent ?? patches.content);
  const bins = await client.callTool({ name: 'render_bin_samples', arguments: { layer: 'features.0', bin: 300 } });
  check(bins.isError && bins.content[0].text.includes('"bin"'), 'render_bin_samples: a bin out of range is refused',
        bins.content);
  const frequency = json(await client.callTool({
    name: 'set_update_frequency', arguments: { unit: 'batch', n: 10, phase: 'train' } }));
  check(frequency.update_frequency.n === 10 && frequency.update_frequency.phase === 'train',
        'set_update_frequency: every 10 train batches', frequency.update_frequency);
  const unknownLayer = await client.callTool({ name: 'watch_layers', arguments: { layers: ['no_such_layer'] } });
  check(unknownLayer.isError && unknownLayer.content[0].text.includes('"no_such_layer"'),
        'watch_layers: an unknown layer is a tool error naming it', unknownLayer.content);
  const scope = json(await client.callTool({ name: 'set_stats_scope', arguments: { scope: 'all' } }));
  check(scope.stats_scope === 'all', 'set_stats_scope: all', scope);

  const picture = await client.callTool({
    name: 'render_layer', arguments: { layers: ['features.0'], kind: 'both', sample: 0 } });
  const images = picture.content.filter((c) => c.type === 'image');
  check(!picture.isError && images.length === 2, 'render_layer: activation and gradient images', picture.content.length);
  images.forEach((image, i) => {
    const info = picture.structuredContent.images[i];
    const { width, height } = decodePng(Buffer.from(image.data, 'base64'));
    check(image.mimeType === 'image/png' && width === info.sent_width && height === info.sent_height &&
          Math.max(width, height) <= 1568, `render_layer: ${info.kind} PNG decodes at ${width}x${height}`, info);
  });

  const input = await client.callTool({ name: 'render_input', arguments: { sample: 0 } });
  const inputImage = input.content.find((c) => c.type === 'image');
  const inputSize = inputImage && decodePng(Buffer.from(inputImage.data, 'base64'));
  const inputInfo = input.structuredContent;
  check(!input.isError && inputInfo.layout === 'image' && inputInfo.width === 28 && inputInfo.height === 28 &&
        inputSize.width === inputInfo.sent_width && inputSize.height === inputInfo.sent_height,
        `render_input: the 28x28 Fashion-MNIST sample as a ${inputSize.width}x${inputSize.height} PNG`, inputInfo);

  // The demo's first convolution, [16, 1, 3, 3] under Adam: output channel 3's
  // kernels (one input channel: one 3x3 tile) for the weight, its gradient and
  // both moment estimates, and Adam's step with the live lr in the text.
  const weightPictures = await client.callTool({
    name: 'render_weights', arguments: { layer: 'features.0', parameters: ['weight'], index: [3] } });
  const weightInfo = weightPictures.structuredContent;
  check(!weightPictures.isError && weightInfo.images.map((i) => i.tensor).join() === 'weight,gradient,state:exp_avg,state:exp_avg_sq' &&
        weightInfo.images.every((i) => i.tiles === 1 && i.tile_width === 3 && i.tile_height === 3 && i.layout.index[0] === 3) &&
        weightPictures.content.filter((c) => c.type === 'image').length === 4,
        'render_weights: weight, gradient, exp_avg and exp_avg_sq of output channel 3 as 3x3 kernels', weightInfo.images);
  check(weightInfo.parameters[0].scalars.step >= 1 && weightInfo.parameters[0].hyperparameters.lr > 0 &&
        weightPictures.content.some((c) => c.type === 'text' && /features\.0\.weight: lr=0\.001 step=\d+ /.test(c.text)),
        "render_weights: Adam's step and the live lr in a text line", weightInfo.parameters);
  const outOfRange = await client.callTool({ name: 'render_weights', arguments: { layer: 'features.0', index: [16] } });
  check(outOfRange.isError && outOfRange.content[0].text.includes('index 16 of dimension 0 is out of range'),
        'render_weights: an index out of range is a tool error saying what fits', outOfRange.content);

  const refused = await client.callTool({ name: 'render_layer', arguments: { layers: ['no_such_layer'] } });
  check(refused.isError && refused.content[0].text.includes('unknown layer'), 'render_layer: unknown layer is a tool error',
        refused.content);
  const badType = await client.callTool({ name: 'step', arguments: { unit: 3 } });
  check(badType.isError && badType.content[0].text.includes('"unit" must be a string'),
        'step: a wrong argument type is a tool error', badType.content);

  // Experiments on the paused demo CNN: Grad-CAM on the second convolution,
  // integrated gradients on a parameterless ReLU, a picture of the result.
  const kinds = json(await client.callTool({ name: 'list_experiments', arguments: {} }));
  const gradcamKind = kinds.kinds.find((k) => k.kind === 'gradcam');
  check(kinds.kinds.length === 5 && gradcamKind.layers.includes('features.3') &&
        !gradcamKind.layers.includes('classifier.1'),
        'list_experiments: five kinds, Grad-CAM takes conv layers but not the linear ones', gradcamKind);
  const cam = json(await client.callTool({
    name: 'run_experiment',
    arguments: { kind: 'gradcam', layer: 'features.3', params: { batch: 2 }, timeout_seconds: 60 },
  }));
  check(cam.stage === 'done' && cam.targets.length === 2 && cam.attribution_shape.join('x') === '2x14x14',
        'run_experiment: Grad-CAM on features.3 gives a 14x14 map per sample', cam);
  const ig = json(await client.callTool({
    name: 'run_experiment',
    arguments: { kind: 'neuron_ig', layer: 'features.4', params: { channel: 1, batch: 2, ig_steps: 64 },
                 timeout_seconds: 60 },
  }));
  const complete = ig.attribution_sums.every(
    (s, i) => Math.abs(s - ig.target_values[i]) <= 0.01 * Math.abs(ig.target_values[i]) + 1e-5);
  check(ig.stage === 'done' && complete, 'run_experiment: integrated gradients add up to F(x) - F(0)', ig);
  const drawn = await client.callTool({ name: 'render_experiment', arguments: { seq: cam.seq, overlay: true } });
  const drawnImage = drawn.content.find((c) => c.type === 'image');
  const drawnSize = drawnImage && decodePng(Buffer.from(drawnImage.data, 'base64'));
  check(!drawn.isError && drawnSize.width > 0 && drawn.structuredContent.overlay === true,
        `render_experiment: the Grad-CAM overlay as a ${drawnSize?.width}x${drawnSize?.height} PNG`,
        drawn.structuredContent);
  // Session defaults: layered under the caller's params, shown by get_settings and list_experiments.
  const defaults = json(await client.callTool({
    name: 'set_experiment_defaults', arguments: { kind: 'gradcam', params: { batch: 3, shade: 1 } },
  }));
  check(defaults.experiment_defaults.gradcam?.batch === 3 && defaults.ignored_params.join() === 'shade',
        'set_experiment_defaults: gradcam batch 3, the unknown key reported', defaults);
  const camDefault = json(await client.callTool({
    name: 'run_experiment', arguments: { kind: 'gradcam', layer: 'features.3', timeout_seconds: 60 },
  }));
  const listedBatch = json(await client.callTool({ name: 'list_experiments', arguments: {} }))
    .kinds.find((k) => k.kind === 'gradcam').params.find((p) => p.key === 'batch').default;
  check(camDefault.params.batch === 3 && camDefault.attribution_shape[0] === 3 && listedBatch === 3,
        'run_experiment: the session default applies; list_experiments shows it', camDefault.params);
  const badParam = await client.callTool({
    name: 'run_experiment', arguments: { kind: 'occlusion', layer: 'features.0', params: { window: 0 } },
  });
  check(badParam.isError && badParam.content[0].text.includes('"window" must be at least 1'),
        'run_experiment: a parameter out of range is a tool error naming it', badParam.content);

  // Probes on the paused demo CNN ([N,1,28,28] Fashion-MNIST images): pin,
  // eval mode, a white pixel at [14, 14] of sample 0; the layers then show
  // perturbed - original; a pixel off the image is a tool error saying what fits.
  const pinned = json(await client.callTool({ name: 'pin_batch', arguments: { timeout_seconds: 30 } }));
  check(pinned.pinned && pinned.result?.run >= 1 && pinned.pinned_position?.text,
        'pin_batch: the batch is pinned and re-run', pinned);
  const evalMode = json(await client.callTool({ name: 'set_probe_mode', arguments: { mode: 'eval', timeout_seconds: 30 } }));
  check(evalMode.mode === 'eval' && evalMode.result?.run > pinned.result.run, 'set_probe_mode: eval re-runs it', evalMode);
  const white = json(await client.callTool({
    name: 'add_perturbation', arguments: { index: [14, 14], values: [2.8], timeout_seconds: 30 },
  }));
  check(white.result?.diff === true && white.perturbations.length === 1 && white.perturbations[0].input === 'input',
        'add_perturbation: the layers show perturbed - original', white);
  const offImage = await client.callTool({ name: 'add_perturbation', arguments: { index: [28, 0], values: [1] } });
  check(offImage.isError && offImage.content[0].text.includes('y in 0..27'),
        'add_perturbation: a pixel off the image is a tool error saying what fits', offImage.content);
  const probeStatus = json(await client.callTool({ name: 'get_probe_status', arguments: {} }));
  check(probeStatus.active && probeStatus.hint.includes('perturbed - original'),
        'get_probe_status: active, the hint says what the pictures show', probeStatus);
  const cleared = json(await client.callTool({ name: 'clear_perturbations', arguments: {} }));
  const unpinned = json(await client.callTool({ name: 'unpin_batch', arguments: {} }));
  const off = json(await client.callTool({ name: 'set_probe_mode', arguments: { mode: 'unchanged' } }));
  check(cleared.cleared === 1 && !unpinned.pinned && !off.active && off.result === null,
        'clear_perturbations, unpin_batch, set_probe_mode unchanged: the probe ends', off);

  await transport.terminateSession();
  await client.close();
  check(true, 'session ended');
  clearTimeout(deadline);
} catch (error) {
  fail(error?.stack ?? String(error));
}
