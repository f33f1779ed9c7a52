// Rendered strips by (connection generation, snapshot sequence, layer, kind,
// sample, options). The server always draws its latest snapshot (the request
// names the page's only so that a newer one that cannot give the picture is
// no refusal), so the snapshot identity lives in this key, and a new snapshot
// is a new key. Entries are fetched here or put in by the
// push channel (stripPush.ts) as the server sends them.
import { renderStrip, type Rendered } from '../api/client';
import type { StripView } from '../api/types';
import type { StripInfo } from '../api/types';

export type RenderedStrip = Rendered<StripInfo>;

// Each entry holds its PNG bytes (tens of KB): a few hundred is plenty for
// going back and forth between samples and options.
const MAX_ENTRIES = 400;
const cache = new Map<string, Promise<RenderedStrip>>();

export function renderKey(generation: number, sequence: number, p: StripView): string {
  return `${generation}|${sequence}|${p.layer}|${p.kind}|${p.sample}|${p.average}|${p.values}`;
}

// `sequence`: the snapshot the page shows (in `key`).
export function loadStrip(key: string, params: StripView, sequence: number): Promise<RenderedStrip> {
  const hit = cache.get(key);
  if (hit) {
    // Refresh its place in the eviction order.
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  return putStrip(key, renderStrip(params, sequence));
}

export function hasStrip(key: string): boolean {
  return cache.has(key);
}

// Stores a strip that is on its way or in. A failure is not remembered: the
// next view of the strip asks again.
export function putStrip(key: string, pending: Promise<RenderedStrip>): Promise<RenderedStrip> {
  cache.delete(key);
  cache.set(key, pending);
  pending.catch(() => {
    if (cache.get(key) === pending) cache.delete(key);
  });
  while (cache.size > MAX_ENTRIES) cache.delete(cache.keys().next().value!);
  return pending;
}
