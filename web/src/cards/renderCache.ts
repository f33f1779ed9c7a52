// Rendered strips by (connection generation, snapshot sequence, layer, kind,
// sample, options). The server's render URL names no snapshot (it always
// draws the latest), so the snapshot identity lives in this key instead, and
// a new snapshot is a new key.
import { renderLayer, type LayerRenderParams, type Rendered } from '../api/client';
import type { LayerRenderInfo } from '../api/types';

const MAX_ENTRIES = 600;
const cache = new Map<string, Promise<Rendered<LayerRenderInfo>>>();

export function renderKey(generation: number, sequence: number, p: LayerRenderParams): string {
  return `${generation}|${sequence}|${p.layer}|${p.kind}|${p.sample}|${p.average}|${p.values}`;
}

export function loadStrip(key: string, params: LayerRenderParams): Promise<Rendered<LayerRenderInfo>> {
  const hit = cache.get(key);
  if (hit) {
    // Refresh its place in the eviction order.
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  const pending = renderLayer(params);
  cache.set(key, pending);
  // A failure is not remembered: the next view of the strip asks again.
  pending.catch(() => {
    if (cache.get(key) === pending) cache.delete(key);
  });
  while (cache.size > MAX_ENTRIES) cache.delete(cache.keys().next().value!);
  return pending;
}
