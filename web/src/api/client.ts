// REST client for the nansense server on the page's own origin. Each call
// names a server command; its route, arguments and reply types come from
// routes.ts and types.ts, which tests/wire/check_types.sh holds to the
// server's command table.
import { routes } from './routes';
import type {
  CommandArgs,
  ExperimentKindName,
  ExperimentPictureInfo,
  InputInfo,
  InstrumentStripInfo,
  ProbeMode,
  Replies,
  StepUnit,
  StripInfo,
  StripView,
  WeightLayout,
  WeightStripInfo,
} from './types';

// On a non-loopback bind the server prints a URL with ?token=; the page keeps
// presenting it (the cookie it sets may be blocked or cleared).
export const pageToken: string | null = new URLSearchParams(location.search).get('token');

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

// A picture asked of a snapshot the page shows that the server's newer
// snapshot cannot give (no gradient in an eval batch, fewer samples): not a
// refusal of the page's snapshot. The server answers 204 No Content (an error
// status would be logged by the browser as a failed load); the page drops the
// request, as the newer snapshot is on its way to it.
export class SnapshotReplaced extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SnapshotReplaced';
  }
}

function headers(extra?: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  if (pageToken) h.Authorization = `Bearer ${pageToken}`;
  return h;
}

async function errorFrom(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = (await res.json()) as { error?: unknown };
    if (typeof body.error === 'string') message = body.error;
  } catch {
    // Not JSON (a proxy's page, a dropped body): the status line says enough.
  }
  return new ApiError(res.status, message);
}

// A query; its arguments, if any, in the query string (lists comma-separated).
async function get<K extends keyof Replies & keyof typeof routes>(
  name: K,
  signal?: AbortSignal,
  params?: Record<string, string>,
): Promise<Replies[K]> {
  const query = params && Object.keys(params).length ? `?${new URLSearchParams(params)}` : '';
  const res = await fetch(routes[name].path + query, { headers: headers(), cache: 'no-store', signal });
  if (!res.ok) throw await errorFrom(res);
  return (await res.json()) as Replies[K];
}

// A command: its arguments as the JSON body.
async function post<K extends keyof CommandArgs & keyof Replies & keyof typeof routes>(
  name: K,
  args: CommandArgs[K],
  keepalive = false,
): Promise<Replies[K]> {
  const res = await fetch(routes[name].path, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json' }),
    body: JSON.stringify(args),
    // Outlives the page (a tab closing tells the server on its way out).
    keepalive,
  });
  if (!res.ok) throw await errorFrom(res);
  return (await res.json()) as Replies[K];
}

export const getStatus = (signal?: AbortSignal) => get('get_status', signal);
export const getArchitecture = (signal?: AbortSignal) => get('get_architecture', signal);
export const getSnapshot = (signal?: AbortSignal) => get('get_snapshot', signal);

// The page follows the run over the push channel: commands never wait for
// the next pause, so no request is held open.
const now = { timeout_seconds: 0 };
export const step = (unit: StepUnit) => post('step', { unit, ...now });
export const run = () => post('run', now);
export const detach = () => post('run', { detach: true, ...now });
export const pause = () => post('pause', now);
export const runUntil = (phase: string, epoch: number, batch: number) =>
  post('run_until', { phase, epoch, batch, ...now });

export const getTimeTravel = (signal?: AbortSignal) => get('get_time_travel_status', signal);
export const timeTravel = (epoch: number) => post('time_travel', { epoch, ...now });

export const getDebug = (signal?: AbortSignal) => get('get_debug_report', signal);
// A partial update: only the fields given change; the server validates them.
export const setDebugSettings = (patch: CommandArgs['configure_debug_checks']) => post('configure_debug_checks', patch);
// No category: every category the standing error has.
export const silenceDebug = (category?: CommandArgs['silence_debug_check']['category']) =>
  post('silence_debug_check', category ? { category } : {});
export const clearDebug = () => post('clear_debug_error', {});
// 409 when no update is held.
export const chooseUpdate = (action: CommandArgs['choose_update']['action']) => post('choose_update', { action });

// Capture the next batch without pausing (the page follows it over the push).
export const refresh = () => post('refresh', now);

export const getSettings = (signal?: AbortSignal) => get('get_settings', signal);
export const setUpdateFrequency = (f: CommandArgs['set_update_frequency']) => post('set_update_frequency', f);
export const setStatsScope = (scope: CommandArgs['set_stats_scope']['scope']) => post('set_stats_scope', { scope });
export const watchLayers = (layers: string[]) => post('watch_layers', { layers });
export const unwatchLayers = (layers: string[]) => post('unwatch_layers', { layers });
// A partial update; the reply says whether it cleared the statistics.
export const setWatchPerformance = (patch: CommandArgs['set_watch_performance']) => post('set_watch_performance', patch);

// --- probes on the paused model (the input pane); the page follows their
// runs over the push channel (the status carries the probe) ---
export const pinBatch = () => post('pin_batch', now);
export const unpinBatch = () => post('unpin_batch', now);
export const setProbeMode = (mode: ProbeMode) => post('set_probe_mode', { mode, ...now });
export const addPerturbation = (args: Omit<CommandArgs['add_perturbation'], 'timeout_seconds'>) =>
  post('add_perturbation', { ...args, ...now });
export const clearPerturbations = () => post('clear_perturbations', now);

export const listStats = (signal?: AbortSignal) => get('list_stats', signal);
export const getStatsHistory = (args: CommandArgs['get_stats_history'], signal?: AbortSignal) =>
  get('get_stats_history', signal, args.phase ? { layer: args.layer, phase: args.phase } : { layer: args.layer });
export const getCurrentStats = (layer: string, signal?: AbortSignal) =>
  get('get_current_stats', signal, { layer } satisfies Record<keyof CommandArgs['get_current_stats'], string>);
export const getPatches = (args: CommandArgs['get_patches'], signal?: AbortSignal) =>
  get('get_patches', signal, strings(args));
export const getBinSamples = (args: CommandArgs['get_bin_samples'], signal?: AbortSignal) =>
  get('get_bin_samples', signal, strings(args));
export const setPatchLayers = (layers: string[] | null) => post('set_patch_layers', layers ? { layers } : {});

// Query parameters from arguments (absent ones left out).
function strings(args: object): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(args)) if (v !== undefined && v !== null) out[k] = String(v);
  return out;
}
// A saved recording's MP4 as an address for the page's <video> and download
// link, which send no header of the page's: the token rides in the query.
export function recordingFileUrl(path: string, download = false): string {
  const args: CommandArgs['get_recording_file'] = download ? { path, download } : { path };
  const q = new URLSearchParams(strings(args));
  if (pageToken) q.set('token', pageToken);
  return new URL(`${routes.get_recording_file.path}?${q}`, location.href).href;
}
export const getMetrics = (layers?: string[], signal?: AbortSignal) =>
  get('get_metrics', signal, layers ? { layers: layers.join(',') } : undefined);

// A rendered PNG and what it shows (the X-Nansense-Render header's JSON).
export interface Rendered<I> {
  png: Uint8Array;
  info: I;
}

async function getImage<I>(path: string, params: Record<string, string>, signal?: AbortSignal): Promise<Rendered<I>> {
  const res = await fetch(`${path}?${new URLSearchParams(params)}`, { headers: headers(), cache: 'no-store', signal });
  if (!res.ok) throw await errorFrom(res);
  if (res.status === 204) {
    throw new SnapshotReplaced(res.headers.get('X-Nansense-Replaced') ?? `snapshot ${params.sequence} was replaced`);
  }
  const header = res.headers.get('X-Nansense-Render');
  if (!header) throw new ApiError(res.status, `${path} answered without an X-Nansense-Render header`);
  return { png: new Uint8Array(await res.arrayBuffer()), info: JSON.parse(header) as I };
}

// A data: URL for a PNG. Unlike a blob: URL it needs no round trip to the
// browser process to create, load or revoke, which on a pause with a dozen
// strips is most of the page's own share of the latency.
export function pngUrl(png: Uint8Array): string {
  const bytes = png as Uint8Array & { toBase64?: () => string };
  if (typeof bytes.toBase64 === 'function') return `data:image/png;base64,${bytes.toBase64()}`;
  let binary = '';
  const CHUNK = 0x8000;
  for (let i = 0; i < png.length; i += CHUNK) {
    binary += String.fromCharCode(...png.subarray(i, i + CHUNK));
  }
  return `data:image/png;base64,${btoa(binary)}`;
}

// `sequence`: the snapshot the page shows, for which the picture is asked
// (SnapshotReplaced when the server's newer one cannot give it).
export const renderStrip = (view: StripView, sequence: number, signal?: AbortSignal) =>
  getImage<StripInfo>(
    routes.render_strip.path,
    {
      layer: view.layer,
      kind: view.kind,
      sample: String(view.sample),
      average: String(view.average),
      values: view.values,
      sequence: String(sequence),
    } satisfies Record<keyof CommandArgs['render_strip'], string>,
    signal,
  );

export const renderInput = (input: number, sample: number, sequence: number, signal?: AbortSignal) =>
  getImage<InputInfo>(
    routes.render_input.path,
    {
      input: String(input),
      sample: String(sample),
      sequence: String(sequence),
    } satisfies Record<keyof CommandArgs['render_input'], string>,
    signal,
  );

// One sample of a layer-tensor instrument's output (the extra strips under a card).
export const renderInstrumentStrip = (
  view: Omit<StripView, 'kind'> & { instrument: string },
  sequence: number,
  signal?: AbortSignal,
) =>
  getImage<InstrumentStripInfo>(
    routes.render_instrument_strip.path,
    {
      layer: view.layer,
      instrument: view.instrument,
      sample: String(view.sample),
      average: String(view.average),
      values: view.values,
      sequence: String(sequence),
    } satisfies Record<keyof CommandArgs['render_instrument_strip'], string>,
    signal,
  );

// --- the Weights page (/weights) ---
export const getWeightStats = (layer: string, signal?: AbortSignal) =>
  get('get_weight_stats', signal, { layer } satisfies Partial<Record<keyof CommandArgs['get_weight_stats'], string>>);
// `tensor`: "weight", "gradient", "state:<key>" or "instrument:<name>";
// without a layout the server's default for the tensor's shape.
export const renderWeightStrip = (
  layer: string,
  parameter: string,
  tensor: string,
  layout: WeightLayout | null,
  sequence: number,
  signal?: AbortSignal,
) => {
  const params: Partial<Record<keyof CommandArgs['render_weight_strip'], string>> = {
    layer,
    parameter,
    tensor,
    sequence: String(sequence),
  };
  if (layout) {
    params.x_dim = String(layout.x_dim ?? -1);
    params.y_dim = String(layout.y_dim ?? -1);
    params.tile_dim = String(layout.tile_dim ?? -1);
    if (layout.index.length) params.index = layout.index.join(',');
  }
  return getImage<WeightStripInfo>(routes.render_weight_strip.path, params as Record<string, string>, signal);
};

// --- experiments (/experiment) ---
export const listExperiments = (signal?: AbortSignal) => get('list_experiments', signal);
// timeout_seconds 0: returns at once with the queued result; the page polls.
export const runExperiment = (kind: ExperimentKindName, layer: string, params: Record<string, unknown>) =>
  post('run_experiment', { kind, layer, params, timeout_seconds: 0 });
export const getExperimentResult = (seq: number, signal?: AbortSignal) =>
  get('get_experiment_result', signal, { seq: String(seq) });
export const cancelExperiment = (seq?: number) => post('cancel_experiment', seq === undefined ? {} : { seq });
export const setAutoRunExperiments = (enabled: boolean) => post('set_auto_run_experiments', { enabled });
export const setAutoExperiment = (
  tab: string,
  kind: ExperimentKindName,
  layer: string,
  params: Record<string, unknown>,
) => post('set_auto_experiment', { tab, kind, layer, params });
export const clearAutoExperiment = (tab: string, keepalive = false) =>
  post('clear_auto_experiment', { tab }, keepalive);
// The result drawn (dreamed images, or attribution maps beside or over the inputs).
export const renderExperiment = (seq: number, overlay: boolean, signal?: AbortSignal) =>
  getImage<ExperimentPictureInfo>(routes.render_experiment.path, { seq: String(seq), overlay: String(overlay) }, signal);

// --- recordings and snapshots of the page's view (the gear's Recording section) ---
export const listRecordings = (signal?: AbortSignal) => get('list_recordings', signal);
export const startRecording = (view: CommandArgs['start_recording']) => post('start_recording', view);
export const saveSnapshot = (view: CommandArgs['save_snapshot']) => post('save_snapshot', view);
export const stopRecording = (key: string) => post('stop_recording', { key });
export const discardRecording = (key: string) => post('discard_recording', { key });
