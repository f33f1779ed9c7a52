// What the diagram shows: the architecture with its shape ops folded (or
// not), its module groups and which of them are open, the graph those make
// and the layout request for it.
import { useCallback, useMemo } from 'preact/hooks';
import type { Architecture, Layer } from '../api/types';
import { store } from '../state/app';
import { useSelector } from '../state/store';
import { foldShapeOps, isFolded, type FoldedGraph } from './fold';
import { groupDetail } from './GroupNode';
import { buildGroups, groupGraph, isGroupId, openingDepth, pathOfId, type Group, type GroupedGraph, type GroupTree } from './groups';
import { NODE_HEIGHT, nodeWidth } from './layout';
import type { LayoutRequest } from './layoutTypes';
import { nodeDetail } from './nodeText';

export type GraphRequest = Omit<LayoutRequest, 'id'>;

export interface ShownGraph {
  architecture: Architecture | null;
  showShapeOps: boolean;
  // The layers and edges once shape ops are folded; null: nothing captured.
  graph: FoldedGraph | null;
  // How many shape ops the architecture has (folded or not).
  shapeOps: number;
  names: string[];
  tree: GroupTree;
  isOpen: (g: Group) => boolean;
  grouped: GroupedGraph | null;
  layers: Map<string, Layer>;
  // What to lay out, and its signature: the node ids and edges, which change
  // exactly when the layout has to.
  request: GraphRequest | null;
  sig: string;
}

export function useShownGraph(): ShownGraph {
  const architecture = useSelector(store, (s) => s.architecture);
  const showShapeOps = useSelector(store, (s) => s.showShapeOps);
  const choices = useSelector(store, (s) => s.groupChoices);

  const graph = useMemo(
    () =>
      architecture?.captured
        ? foldShapeOps(architecture.layers, architecture.edges ?? [], (l) => isFolded(l, showShapeOps))
        : null,
    [architecture, showShapeOps],
  );
  const shapeOps = useMemo(() => architecture?.layers.filter((l) => isFolded(l, false)).length ?? 0, [architecture]);
  const names = useMemo(() => graph?.layers.map((l) => l.name) ?? [], [graph]);
  const tree = useMemo(() => buildGroups(names), [names]);
  const depth = useMemo(() => openingDepth(tree), [tree]);
  const isOpen = useCallback((g: Group) => choices[g.path] ?? g.depth < depth, [choices, depth]);
  const grouped = useMemo(() => (graph ? groupGraph(tree, names, graph.edges, isOpen) : null), [graph, tree, names, isOpen]);
  const layers = useMemo(() => new Map((graph?.layers ?? []).map((l) => [l.name, l])), [graph]);
  const request = useMemo(() => (grouped ? layoutRequest(grouped, tree, layers) : null), [grouped, tree, layers]);
  // Lay out again only when the graph shown changes, not on every refetch.
  const sig = useMemo(() => (request ? JSON.stringify([request.nodes.map((n) => n.id), request.edges.map((e) => [e.from, e.to])]) : ''), [request]);

  return { architecture, showShapeOps, graph, shapeOps, names, tree, isOpen, grouped, layers, request, sig };
}

// Each node sized for its text; a closed group wide enough for its count.
function layoutRequest(grouped: GroupedGraph, tree: GroupTree, layers: Map<string, Layer>): GraphRequest {
  return {
    nodes: grouped.nodes.map((id) => {
      if (isGroupId(id)) {
        const g = tree.byPath.get(pathOfId(id))!;
        return { id, width: nodeWidth(`▸ ${g.path}`, `${groupDetail(g)} · 999 shown`), height: NODE_HEIGHT };
      }
      const l = layers.get(id)!;
      return { id, width: nodeWidth(l.name, nodeDetail(l)), height: NODE_HEIGHT };
    }),
    edges: grouped.edges,
  };
}
