// The Stats page's state: what the user chose (view, phase, layer, axes) and
// the statistics fetched for it. Statistics are refetched when the status
// says a newer set was published (status.stats.sequence), the current batch's
// when a newer snapshot is (snapshot_sequence): one request at a time, at
// most ~5 a second, so a fast-running loop cannot flood the server.
import * as api from '../api/client';
import type { CurrentStats, PatchGrid, Metrics, StatsHistory, StatsList } from '../api/types';
import { store, toast } from './app';
import { createStore } from './store';
import { applyStatus } from './sync';

export type StatsView = 'histogram' | 'minmax' | 'graphs';
const VIEWS: StatsView[] = ['histogram', 'minmax', 'graphs'];
// The layer picker's "All watched layers".
export const ALL_LAYERS = '*';
// "All watched layers" is offered while 1..MAX_ALL layers carry statistics.
export const MAX_ALL = 9;
const MIN_INTERVAL_MS = 200;

export interface StatsPageState {
  view: StatsView;
  // A phase, or null for "Current batch"; undefined until the user picks
  // (then the page follows the training phase where it has statistics).
  phase: string | null | undefined;
  layer: string | null;
  logX: boolean;
  logY: boolean;
  // Min/Max view: which gallery, and the channel's activation over the inputs.
  grid: PatchGrid;
  heatmap: boolean;
  // The grids the shown patches hold (the average ones only with
  // average patches on).
  grids: PatchGrid[];
  retain: boolean;
  // null: on while the under/overflow check has tripped.
  band: boolean | null;
  list: StatsList | null;
  histories: Record<string, StatsHistory>;
  current: Record<string, CurrentStats>;
  // Why a layer's current-batch statistics could not be had.
  currentErrors: Record<string, string>;
  metrics: Metrics | null;
  loading: boolean;
}

function initial(): StatsPageState {
  const q = new URLSearchParams(location.search);
  const phase = q.get('phase');
  return {
    view: VIEWS.find((v) => v === q.get('view')) ?? 'histogram',
    phase: phase == null ? undefined : phase === 'current' ? null : phase,
    layer: q.get('layer'),
    logX: true,
    logY: false,
    grid: 'max_pixel',
    heatmap: false,
    grids: ['max_pixel', 'min_pixel'],
    retain: false,
    band: null,
    list: null,
    histories: {},
    current: {},
    currentErrors: {},
    metrics: null,
    loading: true,
  };
}

export const statsStore = createStore<StatsPageState>(initial());

// The choices the address keeps, so a reload or a shared link opens the same.
function writeUrl(): void {
  const s = statsStore.get();
  const q = new URLSearchParams(location.search);
  const set = (k: string, v: string | null) => (v == null ? q.delete(k) : q.set(k, v));
  set('layer', s.layer);
  set('view', s.view === 'histogram' ? null : s.view);
  set('phase', s.phase === undefined ? null : (s.phase ?? 'current'));
  const text = q.toString();
  history.replaceState(null, '', `${location.pathname}${text ? `?${text}` : ''}`);
}

export function choose(patch: Partial<Pick<StatsPageState, 'view' | 'phase' | 'layer'>>): void {
  statsStore.set(patch);
  writeUrl();
  kickStats();
  kickCurrent();
}

// Layers with statistics, in graph order.
export function statsLayers(list: StatsList | null): string[] {
  return list?.layers.map((l) => l.layer) ?? [];
}

export function offersAll(list: StatsList | null): boolean {
  const n = list?.layers.length ?? 0;
  return n >= 1 && n <= MAX_ALL;
}

// The phases with statistics for these layers, in the order first seen.
export function phasesOf(list: StatsList | null, layers: string[]): string[] {
  const out: string[] = [];
  for (const l of list?.layers ?? []) {
    if (!layers.includes(l.layer)) continue;
    for (const p of l.phases) if (!out.includes(p.phase)) out.push(p.phase);
  }
  return out;
}

// The layers the page shows: the chosen one, or every layer with statistics.
export function shownLayers(s: Pick<StatsPageState, 'layer' | 'list'>, fallback: string | null): string[] {
  if (s.layer === ALL_LAYERS) return offersAll(s.list) ? statsLayers(s.list) : statsLayers(s.list).slice(0, 1);
  const layer = s.layer ?? statsLayers(s.list)[0] ?? fallback;
  return layer ? [layer] : [];
}

// The phase shown: the user's pick (Graphs has no current batch: its first
// phase instead; Histogram and Min/Max have); until then the training phase when it has statistics
// here, else the first phase that has (a page opened during epoch 0's first
// val batches shows train's), else the current batch. settlePhase keeps
// that first answer, so a page opened on a running loop does not flip
// between its phases.
export function shownPhase(s: Pick<StatsPageState, 'list' | 'view' | 'phase'>, layers: string[], livePhase: string | null): string | null {
  const phases = phasesOf(s.list, layers);
  if (s.view === 'graphs') return typeof s.phase === 'string' ? s.phase : (phases[0] ?? null);
  if (s.phase !== undefined) return s.phase;
  return livePhase && phases.includes(livePhase) ? livePhase : (phases[0] ?? null);
}

export function settlePhase(): void {
  const s = statsStore.get();
  if (s.phase !== undefined || !s.list) return;
  statsStore.set({ phase: displayed().phase });
}

function firstLayer(): string | null {
  const arch = store.get().architecture;
  return arch?.layers.find((l) => l.role !== 'input')?.name ?? arch?.layers[0]?.name ?? null;
}

// What the page shows, with `list` in place of the one it holds.
function displayed(list: StatsList | null = statsStore.get().list): { layers: string[]; phase: string | null } {
  const s = { ...statsStore.get(), list };
  const layers = shownLayers(s, firstLayer());
  return { layers, phase: shownPhase(s, layers, store.get().status?.live_position?.phase ?? null) };
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

// Runs `task` now, or once the one in flight is done and MIN_INTERVAL_MS has
// passed since it started; calls in between merge into that one run.
function singleFlight(task: () => Promise<void>): () => void {
  let running = false;
  let again = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let lastStart = 0;
  const kick = (): void => {
    if (running || timer !== undefined) {
      again = true;
      return;
    }
    const wait = lastStart + MIN_INTERVAL_MS - Date.now();
    if (wait > 0) {
      timer = setTimeout(() => {
        timer = undefined;
        kick();
      }, wait);
      return;
    }
    running = true;
    again = false;
    lastStart = Date.now();
    void task().finally(() => {
      running = false;
      if (again) kick();
    });
  };
  return kick;
}

let reportedStatsError = '';

// A layer's statistics can go between the list and its history (flushed by a
// performance change, dropped by narrowing the scope or a time-travel jump):
// the next publish brings a list without it.
function droppedMeanwhile(e: unknown): null {
  if (e instanceof api.ApiError && e.status === 404) return null;
  throw e;
}

async function fetchStats(): Promise<void> {
  const generation = store.get().generation;
  try {
    const list = await api.listStats();
    const { layers } = displayed(list);
    const have = new Set(statsLayers(list));
    const wanted = layers.filter((l) => have.has(l));
    const [histories, metrics] = await Promise.all([
      Promise.all(wanted.map((layer) => api.getStatsHistory({ layer }).catch(droppedMeanwhile))),
      statsStore.get().view === 'graphs' ? api.getMetrics(layers) : Promise.resolve(statsStore.get().metrics),
    ]);
    if (generation !== store.get().generation) return;
    // The list with its histories: the page never shows one newer than the other.
    const kept = histories.filter((h): h is StatsHistory => h != null);
    statsStore.set({ list, histories: Object.fromEntries(kept.map((h) => [h.layer, h])), metrics, loading: false });
    settlePhase();
    reportedStatsError = '';
  } catch (e) {
    statsStore.set({ loading: false });
    // Once per distinct failure: a refetch a few times a second must not
    // bury the page in toasts.
    const text = message(e);
    if (e instanceof api.ApiError && text !== reportedStatsError) toast(`Could not load the statistics: ${text}`);
    reportedStatsError = text;
  }
}

async function fetchCurrent(): Promise<void> {
  const { layers, phase } = displayed();
  if (phase !== null || statsStore.get().view !== 'histogram' || !store.get().status?.snapshot_sequence) return;
  const results = await Promise.all(
    layers.map((layer) =>
      api.getCurrentStats(layer).then(
        (c) => ({ layer, c, error: null }),
        (e: unknown) => ({ layer, c: null, error: message(e) }),
      ),
    ),
  );
  const current: Record<string, CurrentStats> = {};
  const currentErrors: Record<string, string> = {};
  for (const r of results) {
    if (r.c) current[r.layer] = r.c;
    else if (r.error) currentErrors[r.layer] = r.error;
  }
  statsStore.set({ current, currentErrors });
}

export const kickStats = singleFlight(fetchStats);
export const kickCurrent = singleFlight(fetchCurrent);

// Follows the status: a newer statistics sequence or snapshot refetches.
export function startStatsSync(): () => void {
  let statsKey = '';
  let currentKey = '';
  const onChange = () => {
    const s = store.get();
    const sk = `${s.generation}|${s.status?.stats?.sequence ?? 0}|${s.architecture?.captured ?? false}`;
    if (sk !== statsKey) {
      statsKey = sk;
      kickStats();
    }
    const ck = `${s.generation}|${s.status?.snapshot_sequence ?? 0}`;
    if (ck !== currentKey) {
      currentKey = ck;
      kickCurrent();
    }
  };
  onChange();
  return store.subscribe(onChange);
}

// ---- Watching layers (the eye on a card, here and on the main page) ----

export function isWatched(watched: string[] | undefined, layer: string): boolean {
  return watched?.includes(layer) ?? false;
}

export async function setWatched(layer: string, watch: boolean): Promise<void> {
  try {
    await (watch ? api.watchLayers([layer]) : api.unwatchLayers([layer]));
    // The status push says so; without the channel, ask.
    if (store.get().connection !== 'open') applyStatus(await api.getStatus());
  } catch (e) {
    toast(message(e));
  }
}
