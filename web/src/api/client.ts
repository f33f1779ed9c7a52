// REST client for the nansense server on the page's own origin.
import type {
  Architecture,
  DebugCheck,
  DebugReport,
  DebugSettings,
  InputRenderInfo,
  LayerRenderInfo,
  Snapshot,
  Status,
  StripView,
  TimeTravelReport,
  UpdateAction,
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

async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await fetch(path, { headers: headers(), cache: 'no-store', signal });
  if (!res.ok) throw await errorFrom(res);
  return (await res.json()) as T;
}

async function postJson<T>(path: string, body: object): Promise<T> {
  const res = await fetch(path, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json' }),
    body: JSON.stringify(body),
  });
  if (!res.ok) throw await errorFrom(res);
  return (await res.json()) as T;
}

export const getStatus = (signal?: AbortSignal) => getJson<Status>('/api/status', signal);
export const getArchitecture = (signal?: AbortSignal) => getJson<Architecture>('/api/architecture', signal);
export const getSnapshot = (signal?: AbortSignal) => getJson<Snapshot>('/api/snapshot', signal);

export type StepUnit = 'batch' | 'phase' | 'epoch';
export const step = (unit: StepUnit) => postJson<Status>('/api/step', { unit });
export const run = () => postJson<Status>('/api/run', {});
export const detach = () => postJson<Status>('/api/run', { detach: true });
export const pause = () => postJson<Status>('/api/pause', {});
export const runUntil = (phase: string, epoch: number, batch: number) =>
  postJson<Status>('/api/run_until', { phase, epoch, batch });

export const getTimeTravel = (signal?: AbortSignal) => getJson<TimeTravelReport>('/api/time_travel', signal);
export const timeTravel = (epoch: number) => postJson<Status>('/api/time_travel', { epoch });

export const getDebug = (signal?: AbortSignal) => getJson<DebugReport>('/api/debug', signal);
// A partial update: only the fields given change; the server validates them.
export const setDebugSettings = (patch: Partial<Omit<DebugSettings, 'capsule_dir'>>) =>
  postJson<DebugReport>('/api/debug/settings', patch);
// No category: every category the standing error has.
export const silenceDebug = (category?: DebugCheck) =>
  postJson<DebugReport>('/api/debug/silence', category ? { category } : {});
export const clearDebug = () => postJson<DebugReport>('/api/debug/clear', {});
// 409 when no update is held.
export const chooseUpdate = (action: UpdateAction) => postJson<DebugReport>('/api/debug/choose_update', { action });

// A rendered PNG and what it shows (the X-Nansense-Render header's JSON).
export interface Rendered<I> {
  png: Uint8Array;
  info: I;
}

async function getImage<I>(path: string, params: Record<string, string>, signal?: AbortSignal): Promise<Rendered<I>> {
  const res = await fetch(`${path}?${new URLSearchParams(params)}`, { headers: headers(), cache: 'no-store', signal });
  if (!res.ok) throw await errorFrom(res);
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

// What a strip request names (the server always draws its latest snapshot).
export type LayerRenderParams = StripView;

export const renderLayer = (p: LayerRenderParams, signal?: AbortSignal) =>
  getImage<LayerRenderInfo>(
    '/api/render/layer',
    { layer: p.layer, kind: p.kind, sample: String(p.sample), average: String(p.average), values: p.values },
    signal,
  );

export const renderInput = (input: number, sample: number, signal?: AbortSignal) =>
  getImage<InputRenderInfo>('/api/render/input', { input: String(input), sample: String(sample) }, signal);
