// Lays the architecture out off the main thread: a few hundred layers take
// dagre long enough to drop frames.
import dagre from '@dagrejs/dagre';
import type { LayoutRequest, LayoutResult } from './layoutTypes';

self.onmessage = (event: MessageEvent<LayoutRequest>) => {
  const { id, nodes, edges } = event.data;
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 18, ranksep: 30, edgesep: 10, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of nodes) g.setNode(n.id, { width: n.width, height: n.height });
  for (const e of edges) if (g.hasNode(e.from) && g.hasNode(e.to) && e.from !== e.to) g.setEdge(e.from, e.to);
  dagre.layout(g);
  const graph = g.graph();
  const result: LayoutResult = {
    id,
    nodes: g.nodes().map((name) => {
      const n = g.node(name);
      return { id: name, x: n.x ?? 0, y: n.y ?? 0, width: n.width, height: n.height };
    }),
    edges: g.edges().map((e) => ({ from: e.v, to: e.w, points: g.edge(e).points ?? [] })),
    width: graph.width ?? 0,
    height: graph.height ?? 0,
  };
  (self as unknown as Worker).postMessage(result);
};
