// Folding pure shape ops (view, permute, select...) out of the diagram. A
// transformer has dozens of them between its real layers, and their values
// are only their input's rearranged, so by default they are hidden and each
// of their producers is wired straight to the layers that consume them.
import type { Edge, Layer } from '../api/types';

export interface FoldedGraph {
  layers: Layer[];
  edges: Edge[];
}

// Whether a layer is folded away: a shape op while shape ops are not shown.
// `=== true`: an older server's layers have no shape_op and are all kept.
export function isFolded(layer: Layer, showShapeOps: boolean): boolean {
  return !showShapeOps && layer.shape_op === true;
}

// The graph without the folded layers: an edge into a folded layer is
// replaced by edges to every kept layer reached from it through folded ones
// only. Kept layers and edges stay in their given order, each edge once.
export function foldShapeOps(layers: Layer[], edges: Edge[], folded: (layer: Layer) => boolean): FoldedGraph {
  const hidden = new Set(layers.filter(folded).map((l) => l.name));
  if (hidden.size === 0) return { layers, edges };

  const next = new Map<string, string[]>();
  for (const e of edges) {
    const out = next.get(e.from);
    if (out) out.push(e.to);
    else next.set(e.from, [e.to]);
  }

  // The kept layers a folded one feeds, through chains of folded ones.
  // Memoised: a chain shared by many producers is walked once. The graph is
  // acyclic, but a cycle (a malformed answer) must end the walk, not hang it.
  const reach = new Map<string, string[]>();
  const walking = new Set<string>();
  const consumers = (name: string): string[] => {
    const known = reach.get(name);
    if (known) return known;
    if (walking.has(name)) return [];
    walking.add(name);
    const found = new Set<string>();
    for (const to of next.get(name) ?? []) {
      if (!hidden.has(to)) found.add(to);
      else for (const c of consumers(to)) found.add(c);
    }
    walking.delete(name);
    const list = [...found];
    reach.set(name, list);
    return list;
  };

  const seen = new Set<string>();
  const out: Edge[] = [];
  const add = (from: string, to: string) => {
    const key = `${from}\u0000${to}`;
    if (from === to || seen.has(key)) return;
    seen.add(key);
    out.push({ from, to });
  };
  for (const e of edges) {
    if (hidden.has(e.from)) continue;
    if (!hidden.has(e.to)) add(e.from, e.to);
    else for (const to of consumers(e.to)) add(e.from, to);
  }
  return { layers: layers.filter((l) => !hidden.has(l.name)), edges: out };
}
