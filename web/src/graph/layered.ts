// A fast layered (Sugiyama-style) layout for large diagrams, where dagre
// takes seconds (its crossing reduction and coordinate assignment grow
// steeply: about 2 s for 1,000 layers on an idle core, 10+ s on a busy one).
// Linear-ish steps: longest-path ranks, one dummy node per rank an edge
// skips, a few barycenter sweeps to order each rank, and x coordinates that
// pull each node toward the median of its neighbours while keeping the order
// and spacing (isotonic regression per rank, exact and linear).
import type { LayoutRequest, LayoutResult } from './layoutTypes';

export interface LayeredOptions {
  nodesep: number;
  ranksep: number;
  edgesep: number;
  marginx: number;
  marginy: number;
}

interface Item {
  id: string | null; // null: a dummy on a long edge
  width: number;
  height: number;
  rank: number;
  order: number;
  x: number;
  up: number[]; // items in the rank above joined to this one
  down: number[];
}

// An edge's chain of items from its upper end to its lower one (dummies
// between), kept to draw it.
interface Chain {
  from: string;
  to: string;
  path: number[];
  reversed: boolean;
}

export function layeredLayout(request: LayoutRequest, opt: LayeredOptions): LayoutResult {
  const { items, edges } = readGraph(request);
  rankLongestPath(items, edges);
  const chains = splitLongEdges(items, edges, opt.edgesep);
  const rows = firstOrder(items);
  sweepOrder(items, rows);
  assignX(items, rows, opt);
  return placed(request.id, items, rows, chains, opt);
}

// The nodes (the first of a repeated id) and the edges between them, each
// once, self-loops and edges to unknown nodes left out.
function readGraph(request: LayoutRequest): { items: Item[]; edges: [number, number][] } {
  const items: Item[] = [];
  const index = new Map<string, number>();
  for (const n of request.nodes) {
    if (index.has(n.id)) continue;
    index.set(n.id, items.length);
    items.push({ id: n.id, width: n.width, height: n.height, rank: 0, order: 0, x: 0, up: [], down: [] });
  }
  const seen = new Set<string>();
  const edges: [number, number][] = [];
  for (const e of request.edges) {
    const a = index.get(e.from);
    const b = index.get(e.to);
    if (a === undefined || b === undefined || a === b) continue;
    const key = `${a},${b}`;
    if (seen.has(key)) continue;
    seen.add(key);
    edges.push([a, b]);
  }
  return { items, edges };
}

// Ranks: longest path from the sources, in topological order (Kahn). A
// cycle (a malformed graph) is broken by taking the earliest waiting node;
// an edge that then points upward is drawn reversed.
function rankLongestPath(items: Item[], edges: [number, number][]): void {
  const n = items.length;
  const out: number[][] = Array.from({ length: n }, () => []);
  const indeg = new Array<number>(n).fill(0);
  for (const [a, b] of edges) {
    out[a]!.push(b);
    indeg[b]! += 1;
  }
  const done = new Array<boolean>(n).fill(false);
  const queue: number[] = [];
  for (let i = 0; i < n; i++) if (indeg[i] === 0) queue.push(i);
  let next = 0;
  for (let placed = 0; placed < n; placed++) {
    let v: number;
    if (queue.length) v = queue.shift()!;
    else {
      while (done[next]) next++;
      v = next;
    }
    done[v] = true;
    for (const w of out[v]!) {
      if (done[w]) continue;
      items[w]!.rank = Math.max(items[w]!.rank, items[v]!.rank + 1);
      if (--indeg[w]! === 0) queue.push(w);
    }
  }
}

// Long edges through dummies (appended to `items`), one per rank skipped.
function splitLongEdges(items: Item[], edges: [number, number][], edgesep: number): Chain[] {
  const chains: Chain[] = [];
  const link = (a: number, b: number) => {
    items[a]!.down.push(b);
    items[b]!.up.push(a);
  };
  for (const [a0, b0] of edges) {
    const reversed = items[a0]!.rank > items[b0]!.rank;
    let a = reversed ? b0 : a0;
    const b = reversed ? a0 : b0;
    const path = [a];
    for (let r = items[a]!.rank + 1; r < items[b]!.rank; r++) {
      const d = items.length;
      items.push({ id: null, width: edgesep, height: 0, rank: r, order: 0, x: 0, up: [], down: [] });
      link(a, d);
      path.push(d);
      a = d;
    }
    // Same rank (only where a cycle was broken): drawn straight across.
    if (items[a]!.rank < items[b]!.rank) link(a, b);
    path.push(b);
    chains.push({ from: items[a0]!.id!, to: items[b0]!.id!, path: reversed ? path.reverse() : path, reversed });
  }
  return chains;
}

const renumber = (items: Item[], row: number[]) => row.forEach((v, i) => (items[v]!.order = i));

// Ranks in their first order: depth-first from the sources, so a chain of
// layers stays in one column. One row of item indices per rank.
function firstOrder(items: Item[]): number[][] {
  let ranks = 0;
  for (const it of items) ranks = Math.max(ranks, it.rank + 1);
  const rows: number[][] = Array.from({ length: ranks }, () => []);
  const visited = new Array<boolean>(items.length).fill(false);
  const visit = (start: number) => {
    const stack = [start];
    while (stack.length) {
      const v = stack.pop()!;
      if (visited[v]) continue;
      visited[v] = true;
      rows[items[v]!.rank]!.push(v);
      const down = items[v]!.down;
      for (let i = down.length - 1; i >= 0; i--) if (!visited[down[i]!]) stack.push(down[i]!);
    }
  };
  for (let i = 0; i < items.length; i++) if (items[i]!.up.length === 0) visit(i);
  for (let i = 0; i < items.length; i++) if (!visited[i]) visit(i);
  for (const row of rows) renumber(items, row);
  return rows;
}

// Barycenter sweeps, down then up.
function sweepOrder(items: Item[], rows: number[][]): void {
  const ranks = rows.length;
  const barycenter = (v: number, side: 'up' | 'down'): number => {
    const ns = items[v]![side];
    if (!ns.length) return items[v]!.order;
    let s = 0;
    for (const w of ns) s += items[w]!.order;
    return s / ns.length;
  };
  for (let sweep = 0; sweep < 4; sweep++) {
    const downward = sweep % 2 === 0;
    for (let k = 0; k < ranks; k++) {
      const r = downward ? k : ranks - 1 - k;
      if ((downward && r === 0) || (!downward && r === ranks - 1)) continue;
      const row = rows[r]!;
      const keyed = row.map((v) => ({ v, b: barycenter(v, downward ? 'up' : 'down'), o: items[v]!.order }));
      keyed.sort((p, q) => p.b - q.b || p.o - q.o);
      rows[r] = keyed.map((k2) => k2.v);
      renumber(items, rows[r]!);
    }
  }
}

// x: packed first, then each rank pulled toward its neighbours' median,
// keeping order and spacing.
function assignX(items: Item[], rows: number[][], opt: LayeredOptions): void {
  const ranks = rows.length;
  const gap = (a: number, b: number) =>
    (items[a]!.width + items[b]!.width) / 2 + (items[a]!.id === null || items[b]!.id === null ? opt.edgesep : opt.nodesep);
  for (const row of rows) {
    let x = 0;
    row.forEach((v, i) => {
      if (i > 0) x += gap(row[i - 1]!, v);
      items[v]!.x = x;
    });
  }
  const median = (ns: number[]): number | null => {
    if (!ns.length) return null;
    const xs = ns.map((w) => items[w]!.x).sort((a, b) => a - b);
    const m = xs.length >> 1;
    return xs.length % 2 ? xs[m]! : (xs[m - 1]! + xs[m]!) / 2;
  };
  for (let pass = 0; pass < 6; pass++) {
    const downward = pass % 2 === 0;
    for (let k = 0; k < ranks; k++) {
      const r = downward ? k : ranks - 1 - k;
      const row = rows[r]!;
      const desired = row.map((v) => {
        const it = items[v]!;
        const m = median(downward ? it.up : it.down) ?? median(downward ? it.down : it.up);
        return m ?? it.x;
      });
      pullToward(items, row, desired, gap);
    }
  }
}

// Minimise sum (x_i - d_i)^2 with x_i - x_{i-1} >= gap_i: with y_i = x_i -
// offset_i that is isotonic regression, solved by pooling adjacent violators.
function pullToward(items: Item[], row: number[], desired: number[], gap: (a: number, b: number) => number): void {
  const offset: number[] = [0];
  for (let i = 1; i < row.length; i++) offset.push(offset[i - 1]! + gap(row[i - 1]!, row[i]!));
  const blocks: { sum: number; count: number; start: number }[] = [];
  for (let i = 0; i < row.length; i++) {
    blocks.push({ sum: desired[i]! - offset[i]!, count: 1, start: i });
    while (blocks.length > 1) {
      const last = blocks[blocks.length - 1]!;
      const prev = blocks[blocks.length - 2]!;
      if (prev.sum / prev.count <= last.sum / last.count) break;
      prev.sum += last.sum;
      prev.count += last.count;
      blocks.pop();
    }
  }
  for (const b of blocks) {
    const y = b.sum / b.count;
    for (let i = b.start; i < b.start + b.count; i++) items[row[i]!]!.x = y + offset[i]!;
  }
}

// y: each rank as tall as its tallest node; then everything shifted into
// the margins, and the edges' points from their chains.
function placed(id: number, items: Item[], rows: number[][], chains: Chain[], opt: LayeredOptions): LayoutResult {
  const rankY: number[] = [];
  let y = opt.marginy;
  for (const row of rows) {
    let h = 0;
    for (const v of row) h = Math.max(h, items[v]!.height);
    rankY.push(y + h / 2);
    y += h + opt.ranksep;
  }
  let minX = Infinity;
  let maxX = -Infinity;
  for (const it of items) {
    minX = Math.min(minX, it.x - it.width / 2);
    maxX = Math.max(maxX, it.x + it.width / 2);
  }
  if (!items.length) minX = maxX = 0;
  const shift = opt.marginx - minX;

  const nodes = items
    .filter((it) => it.id !== null)
    .map((it) => ({ id: it.id!, x: it.x + shift, y: rankY[it.rank]!, width: it.width, height: it.height }));
  const edges = chains.map((c) => {
    // A reversed chain (a cycle broken) runs from its lower end up.
    const upper = c.reversed ? c.path.length - 1 : 0;
    const pts = c.path.map((v, i) => {
      const it = items[v]!;
      const cy = rankY[it.rank]!;
      // Ends at the bottom of the upper node and the top of the lower one.
      const dy = it.id === null ? 0 : i === upper ? it.height / 2 : -it.height / 2;
      return { x: it.x + shift, y: cy + dy };
    });
    return { from: c.from, to: c.to, points: pts };
  });
  return {
    id,
    nodes,
    edges,
    width: maxX - minX + 2 * opt.marginx,
    height: Math.max(0, y - opt.ranksep) + opt.marginy,
  };
}
