// Lays the architecture out off the main thread. dagre up to DAGRE_MAX_NODES
// nodes (its crossing reduction is the better one); above that the linear
// layered layout of layered.ts, as dagre takes seconds for a few hundred.
import dagre from '@dagrejs/dagre';
import { layeredLayout } from './layered';
import type { LayoutRequest, LayoutResult } from './layoutTypes';

const OPTIONS = { nodesep: 18, ranksep: 30, edgesep: 10, marginx: 16, marginy: 16 };
export const DAGRE_MAX_NODES = 100;

function dagreLayout(request: LayoutRequest): LayoutResult {
  const { id, nodes, edges } = request;
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'TB', ...OPTIONS });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of nodes) g.setNode(n.id, { width: n.width, height: n.height });
  for (const e of edges) if (g.hasNode(e.from) && g.hasNode(e.to) && e.from !== e.to) g.setEdge(e.from, e.to);
  dagre.layout(g);
  const graph = g.graph();
  return {
    id,
    nodes: g.nodes().map((name) => {
      const n = g.node(name);
      return { id: name, x: n.x ?? 0, y: n.y ?? 0, width: n.width, height: n.height };
    }),
    edges: g.edges().map((e) => ({ from: e.v, to: e.w, points: g.edge(e).points ?? [] })),
    width: graph.width ?? 0,
    height: graph.height ?? 0,
  };
}

self.onmessage = (event: MessageEvent<LayoutRequest>) => {
  const request = event.data;
  const started = performance.now();
  const result = request.nodes.length <= DAGRE_MAX_NODES ? dagreLayout(request) : layeredLayout(request, OPTIONS);
  result.workerMs = performance.now() - started;
  (self as unknown as Worker).postMessage(result);
};
