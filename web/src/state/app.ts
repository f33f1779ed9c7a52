// The page's state: what the server last told us, and what the user chose.
import type { Architecture, DebugReport, Layer, Snapshot, SnapshotLayer, Status, Values } from '../api/types';
import { isFolded } from '../graph/fold';
import { currentPage } from '../links';
import { createStore } from './store';

export type Connection = 'connecting' | 'open' | 'closed';

export interface Toast {
  id: number;
  message: string;
  tone: 'error' | 'info';
}

// A request to bring a layer into view in one pane; `nonce` makes a repeated
// request for the same layer fire again.
export interface FocusRequest {
  layer: string;
  // 'both': the diagram centres on the node and the card scrolls into view.
  pane: 'cards' | 'graph' | 'both';
  nonce: number;
}

export interface AppState {
  connection: Connection;
  // Counts connections: a reconnect may reach a restarted server whose
  // snapshot sequences start over, so caches key on (generation, sequence).
  generation: number;
  status: Status | null;
  architecture: Architecture | null;
  // Latest snapshot sequence the server announced; `snapshot` may lag it
  // while its JSON is in flight.
  sequence: number;
  snapshot: Snapshot | null;
  // The samples snapshot `sequence` holds (see batchSize) when the push
  // announcing it said so, before its JSON is in.
  announcedBatchSize: number | null;
  // Layers with a card, in the order they were shown.
  shown: string[];
  hovered: string | null;
  sample: number;
  input: number;
  average: boolean;
  values: Values;
  // Pure shape ops as diagram nodes and cards; off: folded into the edges.
  showShapeOps: boolean;
  // The main page's side panes (architecture, input): shown or put away by
  // the top bar's toggles, remembered across reloads.
  panes: PaneToggles;
  // The diagram's module groups the user opened (true) or closed (false);
  // the others follow the opening depth. Remembered across reloads.
  groupChoices: Record<string, boolean>;
  toasts: Toast[];
  focus: FocusRequest | null;
  customDialogOpen: boolean;
  timeTravelOpen: boolean;
  // A command waiting for "Step over the last batch?".
  confirmLastBatch: (() => void) | null;
  // GET /api/debug for the standing numerical error (null when none), and
  // the dialogs that show and configure it.
  debugReport: DebugReport | null;
  debugDialogOpen: boolean;
  debugSettingsOpen: boolean;
}

const savedOptions = (() => {
  try {
    return JSON.parse(localStorage.getItem('nansense.render') ?? '{}') as { average?: unknown; values?: unknown };
  } catch {
    return {};
  }
})();

export interface PaneToggles {
  architecture: boolean;
  input: boolean;
}

const PANES_KEY = 'nansense.panesShown';

const savedPanes = ((): PaneToggles => {
  try {
    const v = JSON.parse(localStorage.getItem(PANES_KEY) ?? '{}') as Partial<Record<keyof PaneToggles, unknown>>;
    return { architecture: v.architecture !== false, input: v.input !== false };
  } catch {
    return { architecture: true, input: true };
  }
})();

const SHAPE_OPS_KEY = 'nansense.shapeOps';

const savedShapeOps = (() => {
  try {
    return JSON.parse(localStorage.getItem(SHAPE_OPS_KEY) ?? 'false') === true;
  } catch {
    return false;
  }
})();

const GROUPS_KEY = 'nansense.groups';
// Enough for several models' worth of choices; the oldest go first.
const MAX_GROUP_CHOICES = 4000;

const savedGroups = (() => {
  try {
    const v = JSON.parse(localStorage.getItem(GROUPS_KEY) ?? '{}') as unknown;
    if (!v || typeof v !== 'object' || Array.isArray(v)) return {};
    const out: Record<string, boolean> = {};
    for (const [k, b] of Object.entries(v)) if (typeof b === 'boolean') out[k] = b;
    return out;
  } catch {
    return {};
  }
})();

export const store = createStore<AppState>({
  connection: 'connecting',
  generation: 0,
  status: null,
  architecture: null,
  sequence: 0,
  snapshot: null,
  announcedBatchSize: null,
  shown: [],
  hovered: null,
  sample: 0,
  input: 0,
  average: savedOptions.average === true,
  values: savedOptions.values === 'abs' || savedOptions.values === 'square' ? savedOptions.values : 'unchanged',
  showShapeOps: savedShapeOps,
  panes: savedPanes,
  groupChoices: savedGroups,
  toasts: [],
  focus: null,
  customDialogOpen: false,
  timeTravelOpen: false,
  confirmLastBatch: null,
  debugReport: null,
  debugDialogOpen: false,
  debugSettingsOpen: false,
});

export function setRenderOptions(patch: { average?: boolean; values?: Values }): void {
  store.set(patch);
  const { average, values } = store.get();
  localStorage.setItem('nansense.render', JSON.stringify({ average, values }));
}

export function togglePane(pane: keyof PaneToggles): void {
  const panes = { ...store.get().panes, [pane]: !store.get().panes[pane] };
  store.set({ panes });
  try {
    localStorage.setItem(PANES_KEY, JSON.stringify(panes));
  } catch {
    // A full storage only loses the memory of the choice.
  }
}

export function setShowShapeOps(show: boolean): void {
  const { architecture, hovered } = store.get();
  // A card folded away under the pointer gets no pointerleave.
  const stillThere = hovered != null && visibleNames({ architecture, showShapeOps: show }).has(hovered);
  store.set({ showShapeOps: show, hovered: stillThere ? hovered : null });
  localStorage.setItem(SHAPE_OPS_KEY, JSON.stringify(show));
}

// Opens (or closes) diagram groups by path, remembered. `reset` forgets every
// earlier choice first (back to the opening depth).
export function setGroupsOpen(paths: string[], open: boolean, reset = false): void {
  const before = reset ? {} : store.get().groupChoices;
  if (!reset && paths.every((p) => before[p] === open)) return;
  const next: Record<string, boolean> = { ...before };
  for (const p of paths) {
    delete next[p]; // re-inserted last: the newest choice
    next[p] = open;
  }
  const keys = Object.keys(next);
  for (const k of keys.slice(0, Math.max(0, keys.length - MAX_GROUP_CHOICES))) delete next[k];
  store.set({ groupChoices: next });
  try {
    localStorage.setItem(GROUPS_KEY, JSON.stringify(next));
  } catch {
    // A full storage only loses the memory of the choice.
  }
}

// The layers that may have a node and a card: all of them, or all but the
// shape ops while those are folded. Memoised per architecture and choice:
// every node and card asks on every store change.
interface Visible {
  layers: Layer[];
  names: Set<string>;
}
const visibleIndex = new WeakMap<Architecture, { all?: Visible; unfolded?: Visible }>();
const NONE: Visible = { layers: [], names: new Set() };

function visible(s: Pick<AppState, 'architecture' | 'showShapeOps'>): Visible {
  const arch = s.architecture;
  if (!arch) return NONE;
  let entry = visibleIndex.get(arch);
  if (!entry) visibleIndex.set(arch, (entry = {}));
  const key = s.showShapeOps ? 'all' : 'unfolded';
  let v = entry[key];
  if (!v) {
    const layers = arch.layers.filter((l) => !isFolded(l, s.showShapeOps));
    v = entry[key] = { layers, names: new Set(layers.map((l) => l.name)) };
  }
  return v;
}

export const visibleLayers = (s: Pick<AppState, 'architecture' | 'showShapeOps'>): Layer[] => visible(s).layers;
export const visibleNames = (s: Pick<AppState, 'architecture' | 'showShapeOps'>): Set<string> => visible(s).names;

let toastId = 0;
const TOAST_MS = 6000;

export function toast(message: string, tone: Toast['tone'] = 'error'): void {
  const id = ++toastId;
  store.set((s) => ({ toasts: [...s.toasts.slice(-3), { id, message, tone }] }));
  setTimeout(() => dismissToast(id), TOAST_MS);
}

export function dismissToast(id: number): void {
  store.set((s) => ({ toasts: s.toasts.filter((t) => t.id !== id) }));
}

// The samples a snapshot holds: the contract's samples_kept (fewer than the
// batch where the snapshot budget left some out), else its batch_size, else
// the leading dimension of an input's (or any layer's) activation.
export function batchSize(snapshot: Snapshot | null): number {
  if (!snapshot) return 0;
  if (typeof snapshot.samples_kept === 'number') return snapshot.samples_kept;
  if (typeof snapshot.batch_size === 'number') return snapshot.batch_size;
  const input = snapshot.inputs?.[0]?.shape[0];
  if (typeof input === 'number') return input;
  for (const l of snapshot.layers) if (l.activation?.shape.length) return l.activation.shape[0] ?? 0;
  return 0;
}

// The batch size of the latest snapshot, if the page knows it yet.
function currentBatchSize(s: AppState): number | null {
  if (s.snapshot && s.snapshot.sequence === s.sequence) return batchSize(s.snapshot);
  return s.announcedBatchSize;
}

// Whether the selected sample exists in the latest snapshot, so images of it
// may be asked for. A batch is smaller than the last only at a phase's end;
// until the page knows the new size, only sample 0 is sure to exist (asking
// for more would be refused).
export function sampleExists(s: AppState): boolean {
  const n = currentBatchSize(s);
  return n != null ? s.sample < n : s.sample === 0;
}

export function setSample(sample: number): void {
  if (mainRecording(store.get()) && currentPage() === 'main') return;
  const n = currentBatchSize(store.get()) ?? batchSize(store.get().snapshot);
  const clamped = Math.max(0, Math.min(Number.isFinite(sample) ? Math.trunc(sample) : 0, Math.max(0, n - 1)));
  if (clamped !== store.get().sample) store.set({ sample: clamped });
}

let focusNonce = 0;
export function requestFocus(layer: string, pane: FocusRequest['pane']): void {
  store.set({ focus: { layer, pane, nonce: ++focusNonce } });
}

export function setHovered(layer: string | null): void {
  if (store.get().hovered !== layer) store.set({ hovered: layer });
}

// What a recording of the main page holds (its layers, sample and render
// options: start_recording took them as the page had them): the controls
// that change them are disabled with these words until it is saved or deleted.
export const FIXED_BY_RECORDING = 'Fixed while this view records (Settings → Recording: Save & Finish or Delete)';

export const mainRecording = (s: Pick<AppState, 'status'>): boolean => s.status?.recordings.includes('main') ?? false;

// A change to the cards while the page records (a diagram click, which has
// no disabled state): refused, with a note saying why.
function shownFixed(): boolean {
  if (!mainRecording(store.get())) return false;
  toast('The cards are fixed while this view records: Settings → Recording, Save & Finish or Delete', 'info');
  return true;
}

// Click on a diagram node: show (and scroll to) or hide its card.
export function toggleShown(layer: string): void {
  if (shownFixed()) return;
  const { shown } = store.get();
  if (shown.includes(layer)) {
    store.set({ shown: shown.filter((l) => l !== layer) });
  } else {
    store.set({ shown: [...shown, layer] });
    requestFocus(layer, 'cards');
  }
}

export function hideLayer(layer: string): void {
  if (shownFixed()) return;
  store.set((s) => ({ shown: s.shown.filter((l) => l !== layer) }));
}

// Every layer the page shows; a folded shape op keeps its card if it had one,
// for when shape ops are shown again.
export function showAll(): void {
  if (shownFixed()) return;
  const s = store.get();
  const names = visibleLayers(s).map((l) => l.name);
  const set = new Set(names);
  store.set({ shown: [...s.shown.filter((l) => !set.has(l)), ...names] });
}

export function hideAll(): void {
  if (shownFixed()) return;
  store.set({ shown: [] });
}

const DEFAULT_SHOWN = 8;

// The cards the main page's address asks for (?layer=a,b: a shared link),
// in that order.
export function addressLayers(): string[] {
  if (currentPage() !== 'main') return [];
  return (new URLSearchParams(location.search).get('layer') ?? '').split(',').filter(Boolean);
}

// Keeps the user's choice across architecture changes, dropping vanished
// layers; the first architecture shows the layers the address names, else
// the first few non-input layers that are not folded away.
export function shownFor(next: Architecture, previous: Architecture | null, shown: string[], showShapeOps: boolean): string[] {
  const names = new Set(next.layers.map((l) => l.name));
  if (!previous?.captured) {
    const asked = addressLayers().filter((l) => names.has(l));
    if (asked.length) return asked;
    return next.layers
      .filter((l) => l.role !== 'input' && !isFolded(l, showShapeOps))
      .slice(0, DEFAULT_SHOWN)
      .map((l) => l.name);
  }
  return shown.filter((l) => names.has(l));
}

// Every card looks its layer up on every store change: index once per snapshot.
const layerIndex = new WeakMap<Snapshot, Map<string, SnapshotLayer>>();

export function snapshotLayer(snapshot: Snapshot | null, name: string): SnapshotLayer | null {
  if (!snapshot) return null;
  let index = layerIndex.get(snapshot);
  if (!index) {
    index = new Map(snapshot.layers.map((l) => [l.name, l]));
    layerIndex.set(snapshot, index);
  }
  return index.get(name) ?? null;
}

const shownIndex = new WeakMap<string[], Set<string>>();

export function isShown(shown: string[], name: string): boolean {
  let set = shownIndex.get(shown);
  if (!set) {
    set = new Set(shown);
    shownIndex.set(shown, set);
  }
  return set.has(name);
}
