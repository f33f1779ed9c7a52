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
  StripKind,
  TimeTravelReport,
  Values,
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

export interface Rendered<I> {
  blob: Blob;
  info: I;
}

async function getImage<I>(path: string, params: Record<string, string>, signal?: AbortSignal): Promise<Rendered<I>> {
  const res = await fetch(`${path}?${new URLSearchParams(params)}`, { headers: headers(), cache: 'no-store', signal });
  if (!res.ok) throw await errorFrom(res);
  const header = res.headers.get('X-Nansense-Render');
  if (!header) throw new ApiError(res.status, `${path} answered without an X-Nansense-Render header`);
  return { blob: await res.blob(), info: JSON.parse(header) as I };
}

export interface LayerRenderParams {
  layer: string;
  kind: StripKind;
  sample: number;
  average: boolean;
  values: Values;
}

export const renderLayer = (p: LayerRenderParams, signal?: AbortSignal) =>
  getImage<LayerRenderInfo>(
    '/api/render/layer',
    { layer: p.layer, kind: p.kind, sample: String(p.sample), average: String(p.average), values: p.values },
    signal,
  );

export const renderInput = (input: number, sample: number, signal?: AbortSignal) =>
  getImage<InputRenderInfo>('/api/render/input', { input: String(input), sample: String(sample) }, signal);
