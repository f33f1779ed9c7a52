// The strips this page shows, pushed by the server with every snapshot so a
// pause costs no request per picture. The page tells the server which strips
// it watches (the visible ones); for each new snapshot the server sends their
// PNGs over /ws, then "strips_done" naming those it could not draw. A strip
// the push does not bring (watch changed meanwhile, link lost, snapshot
// overtaken) is fetched over HTTP as before.
import { ApiError, renderStrip, SnapshotReplaced } from '../api/client';
import { sendPush } from '../api/push';
import type { StripInfo, StripView, WatchMessage } from '../api/types';
import { sampleExists, snapshotLayer, store } from '../state/app';
import { hasStrip, putStrip, renderKey, type RenderedStrip } from './renderCache';

// A pushed strip that has not come after this long is fetched instead.
const PUSH_PATIENCE_MS = 3000;
// The server's limit on one watch list (kMaxWatchedStrips).
const MAX_WATCHED = 512;

const watched = new Map<symbol, StripView>();
// The watch list the server holds for this connection (what it will push).
let serverViews: StripView[] = [];
let serverWatch = '';
let connected = false;
let generation = -1;
let sendQueued = false;

interface Pending {
  sequence: number;
  view: StripView;
  resolve(r: RenderedStrip): void;
  reject(e: unknown): void;
  timer: ReturnType<typeof setTimeout>;
}
const pending = new Map<string, Pending>();

// Pictures decoded as they arrive, before their card asks (which for a
// gradient waits for the snapshot's JSON): the decoding overlaps that fetch.
// A card takes its own once; those nobody took are freed at the next snapshot.
const decoded = new Map<string, { sequence: number; bitmap: Promise<ImageBitmap> }>();

export function takeDecoded(key: string): Promise<ImageBitmap> | null {
  const d = decoded.get(key);
  if (!d) return null;
  decoded.delete(key);
  return d.bitmap;
}

export function decodePng(png: Uint8Array): Promise<ImageBitmap> {
  return createImageBitmap(new Blob([png as Uint8Array<ArrayBuffer>], { type: 'image/png' }));
}

function dropDecodedBefore(sequence: number): void {
  for (const [key, d] of decoded) {
    if (d.sequence >= sequence) continue;
    decoded.delete(key);
    d.bitmap.then(
      (b) => b.close(),
      () => undefined,
    );
  }
}

// A strip on screen (view) or gone from it (null).
export function watchStrip(id: symbol, view: StripView | null): void {
  if (view) watched.set(id, view);
  else if (!watched.delete(id)) return;
  if (sendQueued) return;
  sendQueued = true;
  queueMicrotask(sendWatch);
}

function sendWatch(): void {
  sendQueued = false;
  if (!connected) return;
  // Top of the page first: the server sends in this order.
  const order = new Map(store.get().shown.map((name, i) => [name, i]));
  const unique = new Map<string, StripView>();
  for (const v of watched.values()) unique.set(renderKey(0, 0, v), v);
  // The server takes at most MAX_WATCHED; a page zoomed far out fetches the
  // rest over HTTP.
  const views = [...unique.values()]
    .sort((a, b) => (order.get(a.layer) ?? 1e9) - (order.get(b.layer) ?? 1e9) || a.kind.localeCompare(b.kind))
    .slice(0, MAX_WATCHED);
  const text = JSON.stringify(views);
  if (text === serverWatch) return;
  if (!sendPush({ type: 'watch', strips: views } satisfies WatchMessage)) return;
  serverWatch = text;
  serverViews = views;
}

export function pushOpened(newGeneration: number): void {
  connected = true;
  generation = newGeneration;
  serverWatch = '';
  serverViews = [];
  sendWatch();
}

export function pushClosed(): void {
  connected = false;
  dropDecodedBefore(Infinity);
  serverWatch = '';
  serverViews = [];
  for (const [key, p] of pending) fetchInstead(key, p);
}

// Snapshot `sequence` exists: the watched strips of it are on their way, so
// a card asking for one now waits for the push instead of fetching it.
export function expectStrips(forGeneration: number, sequence: number): void {
  if (!connected || forGeneration !== generation) return;
  dropDecodedBefore(sequence);
  for (const view of serverViews) {
    const key = renderKey(generation, sequence, view);
    if (hasStrip(key)) continue;
    putStrip(
      key,
      new Promise<RenderedStrip>((resolve, reject) => {
        const p: Pending = {
          sequence,
          view,
          resolve,
          reject,
          timer: setTimeout(() => fetchInstead(key, p), PUSH_PATIENCE_MS),
        };
        pending.set(key, p);
      }),
    );
  }
}

export function receiveStrip(info: StripInfo, png: Uint8Array): void {
  const key = renderKey(generation, info.sequence, info);
  const rendered = { png, info };
  if (!decoded.has(key)) {
    const bitmap = decodePng(png);
    bitmap.catch(() => undefined);  // the card that takes it reports the failure
    decoded.set(key, { sequence: info.sequence, bitmap });
  }
  const p = pending.get(key);
  if (p) {
    settle(key, p);
    p.resolve(rendered);
  } else if (!hasStrip(key)) {
    putStrip(key, Promise.resolve(rendered));
  }
}

// Everything of `sequence` (and older) that was coming has come.
export function stripsDone(sequence: number, failed: (StripView & { error: string })[]): void {
  for (const f of failed) {
    const key = renderKey(generation, sequence, f);
    const p = pending.get(key);
    if (!p) continue;
    settle(key, p);
    p.reject(new ApiError(404, f.error));
  }
  for (const [key, p] of pending) if (p.sequence <= sequence) fetchInstead(key, p);
}

function settle(key: string, p: Pending): void {
  pending.delete(key);
  clearTimeout(p.timer);
}

// The server draws only its latest snapshot: once the page knows of a newer
// one, fetching would bring that one's picture, so a strip of an overtaken
// snapshot is given up; its card has moved on to the newer snapshot's strip.
// A newer snapshot the page has not heard of yet (strips_done of an overtaken
// snapshot comes before the news of the next) may not have the picture (no
// gradient, fewer samples): the server then says it replaced ours
// (SnapshotReplaced) instead of refusing.
//
// Nor is a strip fetched that no card shows any more: a card whose sample
// changed meanwhile has moved on. That is how a phase's smaller last batch
// clamps the sample (63 -> 15): the watch list still named sample 63 when
// the snapshot was announced, the server then pushed nothing for it (the
// list changed after the announcement), and fetching it would be refused
// (sample out of range) and logged by the browser as a failed load.
function fetchInstead(key: string, p: Pending): void {
  settle(key, p);
  const s = store.get();
  if (s.sequence > p.sequence) {
    p.reject(new SnapshotReplaced(`snapshot ${p.sequence} was replaced before its picture came`));
    return;
  }
  if (!isWatched(p.view) || p.view.sample !== s.sample || !sampleExists(s)) {
    p.reject(new SnapshotReplaced(`no card shows ${p.view.layer} ${p.view.kind} of sample ${p.view.sample} any more`));
    return;
  }
  // A gradient exists only on some batches (none in an evaluation phase):
  // fetched only once this snapshot's JSON says it is there, as a card asks
  // (LayerCard's canAsk), never to provoke a 404. The card asks itself when
  // the JSON comes.
  const layer = s.snapshot?.sequence === p.sequence ? snapshotLayer(s.snapshot, p.view.layer) : null;
  if (p.view.kind === 'gradient' && layer?.gradient == null) {
    p.reject(new SnapshotReplaced(`the snapshot ${p.sequence} JSON does not show a gradient of ${p.view.layer} yet`));
    return;
  }
  renderStrip(p.view, p.sequence).then(p.resolve, p.reject);
}

function isWatched(view: StripView): boolean {
  const key = renderKey(0, 0, view);
  for (const v of watched.values()) if (renderKey(0, 0, v) === key) return true;
  return false;
}
