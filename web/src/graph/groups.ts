// Module groups of the diagram: layers grouped by the dotted prefixes of
// their names (module paths, "encoder.layers.0.self_attn.out_proj"), like
// TensorBoard's name scopes. A collapsed group is one node standing for every
// layer under it; the edges between what is shown are the layers' edges
// mapped onto it, each once. Pure functions of the layer names and edges.
import type { Edge } from '../api/types';

export interface Group {
  // The dotted prefix ("encoder.layers.0"); unique among groups.
  path: string;
  // Nesting level among groups: 0 for a group with no group above it.
  depth: number;
  parent: Group | null;
  // Child groups and the layers directly inside (not in a child group), in
  // the order of the layers.
  groups: Group[];
  layers: string[];
  // Every layer under it, in the graph's order.
  all: string[];
}

export interface GroupTree {
  roots: Group[];
  // Layers in no group, in order.
  loose: string[];
  byPath: Map<string, Group>;
  // The innermost group of each layer in one.
  groupOf: Map<string, Group>;
  height: number;
}

// The node id of a collapsed group: a layer name never holds U+0001.
export const GROUP_PREFIX = '\u0001';
export const groupId = (path: string): string => GROUP_PREFIX + path;
export const isGroupId = (id: string): boolean => id.startsWith(GROUP_PREFIX);
export const pathOfId = (id: string): string => id.slice(GROUP_PREFIX.length);

// The dotted prefixes of a layer's name, outermost first ("a.b.c" -> a, a.b).
function prefixes(name: string): string[] {
  const parts = name.split('.');
  const out: string[] = [];
  for (let i = 1; i < parts.length; i++) out.push(parts.slice(0, i).join('.'));
  return out;
}

// Groups by name prefix. A prefix becomes a group only where it helps: it
// must hold at least two layers, and a prefix holding exactly what the one
// below it holds is skipped ("encoder" over only "encoder.layers" is one
// level, named by the inner path). A layer named like a group ("block" beside
// "block.conv") sits inside that group.
export function buildGroups(names: string[]): GroupTree {
  // Layers under each prefix, a layer named like the prefix included.
  const count = new Map<string, number>();
  for (const n of names) for (const p of prefixes(n)) count.set(p, (count.get(p) ?? 0) + 1);
  for (const n of names) if (count.has(n)) count.set(n, count.get(n)! + 1);

  // The chain of kept groups for each layer.
  const chainOf = (name: string): string[] => {
    const all = prefixes(name);
    if (count.has(name)) all.push(name);
    const kept = all.filter((p) => (count.get(p) ?? 0) >= 2);
    // Drop a prefix whose next kept prefix holds as many layers.
    return kept.filter((p, i) => i === kept.length - 1 || count.get(kept[i + 1]!) !== count.get(p));
  };

  const byPath = new Map<string, Group>();
  const groupOf = new Map<string, Group>();
  const roots: Group[] = [];
  const loose: string[] = [];
  let height = 0;
  for (const name of names) {
    const chain = chainOf(name);
    let parent: Group | null = null;
    for (const path of chain) {
      let g = byPath.get(path);
      if (!g) {
        g = { path, depth: parent ? parent.depth + 1 : 0, parent, groups: [], layers: [], all: [] };
        byPath.set(path, g);
        if (parent) parent.groups.push(g);
        else roots.push(g);
        height = Math.max(height, g.depth + 1);
      }
      g.all.push(name);
      parent = g;
    }
    if (parent) {
      parent.layers.push(name);
      groupOf.set(name, parent);
    } else loose.push(name);
  }
  return { roots, loose, byPath, groupOf, height };
}

// The groups a layer is in, outermost first.
export function ancestors(tree: GroupTree, layer: string): Group[] {
  const out: Group[] = [];
  for (let g = tree.groupOf.get(layer) ?? null; g; g = g.parent) out.unshift(g);
  return out;
}

// What a layer is drawn as: itself, or the id of the outermost collapsed
// group it is in.
export function representative(tree: GroupTree, layer: string, isOpen: (g: Group) => boolean): string {
  for (const g of ancestors(tree, layer)) if (!isOpen(g)) return groupId(g.path);
  return layer;
}

export interface GroupedGraph {
  // Node ids in order of their first layer: layer names and groupId()s.
  nodes: string[];
  edges: Edge[];
  // The node each layer is drawn as.
  drawnAs: Map<string, string>;
  // Open groups with something shown inside, outermost first.
  open: Group[];
}

// The graph as shown with the groups `isOpen` says are open: a collapsed
// group's layers are one node, edges inside it vanish, and the edges between
// nodes are listed once each.
export function groupGraph(tree: GroupTree, names: string[], edges: Edge[], isOpen: (g: Group) => boolean): GroupedGraph {
  const drawnAs = new Map<string, string>();
  const nodes: string[] = [];
  const seenNode = new Set<string>();
  const open = new Set<Group>();
  for (const name of names) {
    let id = name;
    for (let g = tree.groupOf.get(name) ?? null; g; g = g.parent) {
      if (!isOpen(g)) id = groupId(g.path);
    }
    drawnAs.set(name, id);
    if (!seenNode.has(id)) {
      seenNode.add(id);
      nodes.push(id);
    }
  }
  for (const g of tree.byPath.values()) {
    if (!isOpen(g)) continue;
    let up: Group | null = g.parent;
    while (up && isOpen(up)) up = up.parent;
    if (!up) open.add(g);
  }
  const seenEdge = new Set<string>();
  const out: Edge[] = [];
  for (const e of edges) {
    const from = drawnAs.get(e.from);
    const to = drawnAs.get(e.to);
    if (!from || !to || from === to) continue;
    const key = `${from}\u0000${to}`;
    if (seenEdge.has(key)) continue;
    seenEdge.add(key);
    out.push({ from, to });
  }
  return { nodes, edges: out, drawnAs, open: [...tree.byPath.values()].filter((g) => open.has(g)) };
}

// Node count with groups above nesting level `depth` open (depth 0: every
// group collapsed).
function countAtDepth(tree: GroupTree, depth: number): number {
  let n = tree.loose.length;
  const walk = (g: Group) => {
    if (g.depth >= depth) {
      n += 1;
      return;
    }
    n += g.layers.length;
    for (const c of g.groups) walk(c);
  };
  for (const g of tree.roots) walk(g);
  return n;
}

// "About 40": a 2-layer nn.TransformerEncoder (41 layers at op level) still
// opens whole.
export const FIT_NODES = 45;

// The deepest nesting level to open by default so that at most `fit` nodes
// show: every group shallower than it is open. 0 when even the top-level
// groups are more than `fit`.
export function openingDepth(tree: GroupTree, fit = FIT_NODES): number {
  let depth = 0;
  for (let d = 1; d <= tree.height; d++) {
    if (countAtDepth(tree, d) > fit) break;
    depth = d;
  }
  return depth;
}

// Layers whose name holds `query` (case-insensitive), names starting with it
// first, at most `limit`.
export function searchLayers(names: string[], query: string, limit = 20): string[] {
  const q = query.trim().toLowerCase();
  if (!q) return [];
  const hits = names.filter((n) => n.toLowerCase().includes(q));
  const rank = (n: string) => {
    const lower = n.toLowerCase();
    const last = lower.slice(lower.lastIndexOf('.') + 1);
    return last.startsWith(q) ? 0 : lower.startsWith(q) ? 1 : 2;
  };
  return hits
    .map((n, i) => ({ n, i, r: rank(n) }))
    .sort((a, b) => a.r - b.r || a.i - b.i)
    .slice(0, limit)
    .map((h) => h.n);
}
