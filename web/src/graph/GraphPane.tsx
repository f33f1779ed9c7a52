// The left pane: the discovered architecture, laid out top to bottom, its
// layers in module groups (groups.ts) that open and close.
import { memo } from 'preact/compat';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { setGroupsOpen, setShowShapeOps, store, toggleShown } from '../state/app';
import { useSelector } from '../state/store';
import { foldShapeOps, isFolded } from './fold';
import { GraphNode } from './GraphNode';
import { GraphSearch } from './GraphSearch';
import { GroupNode, groupDetail } from './GroupNode';
import {
  ancestors,
  buildGroups,
  groupGraph,
  groupId,
  isGroupId,
  openingDepth,
  pathOfId,
  type Group,
  type GroupedGraph,
  type GroupTree,
} from './groups';
import { layoutGraph, NODE_HEIGHT, nodeWidth } from './layout';
import { nodeDetail } from './nodeText';
import type { LayoutResult, PlacedEdge } from './layoutTypes';
import { GraphTooltip, hideTooltip } from './tooltip';
import { Viewport, type View } from './viewport';

export function GraphPane() {
  const architecture = useSelector(store, (s) => s.architecture);
  const showShapeOps = useSelector(store, (s) => s.showShapeOps);
  const choices = useSelector(store, (s) => s.groupChoices);
  const focus = useSelector(store, (s) => (s.focus?.pane === 'graph' || s.focus?.pane === 'both' ? s.focus : null));
  const hovered = useSelector(store, (s) => s.hovered);
  const [layout, setLayout] = useState<LayoutResult | null>(null);
  const [layoutError, setLayoutError] = useState<string | null>(null);
  const host = useRef<HTMLDivElement>(null);
  const group = useRef<SVGGElement>(null);
  const viewport = useRef<Viewport | null>(null);
  const laidOut = useRef('');
  // What to centre on once a layout holding it comes (a toggled group, a
  // revealed layer); null: fit the width, as for a new graph.
  const centreNext = useRef<string | null>(null);
  const fitted = useRef(false);
  const centredNonce = useRef(0);

  const graph = useMemo(
    () =>
      architecture?.captured
        ? foldShapeOps(architecture.layers, architecture.edges, (l) => isFolded(l, showShapeOps))
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

  const request = useMemo(() => {
    if (!grouped) return null;
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
  }, [grouped, tree, layers]);
  // Lay out again only when the graph shown changes, not on every refetch.
  const sig = useMemo(() => (request ? JSON.stringify([request.nodes.map((n) => n.id), request.edges.map((e) => [e.from, e.to])]) : ''), [request]);
  useEffect(() => {
    if (!request || sig === laidOut.current) return;
    laidOut.current = sig;
    let cancelled = false;
    const started = performance.now();
    layoutGraph(request).then(
      (result) => {
        if (cancelled) return;
        place(result);
        setLayout(result);
        // For the bench and the tests: how long the last layout took, until
        // the nodes are drawn (the next frame after the render).
        const nodes = result.nodes.length;
        requestAnimationFrame(() => {
          window.__nansenseGraph = {
            nodes,
            edges: result.edges.length,
            workerMs: result.workerMs ?? 0,
            shownMs: performance.now() - started,
            shownAt: performance.now(),
            count: (window.__nansenseGraph?.count ?? 0) + 1,
          };
        });
      },
      (e: Error) => setLayoutError(e.message),
    );
    return () => {
      cancelled = true;
      laidOut.current = '';
    };
    // Keyed by the signature: a refetch of the same graph does nothing.
  }, [sig]);

  // Big diagrams draw only the nodes and edges near the view (a screen's
  // margin around it), so showing 1,000 layers does not build 1,000 nodes'
  // SVG; the window moves when the view nears its edge.
  const [window_, setWindow] = useState<Rect | null>(null);
  const windowRef = useRef<Rect | null>(null);
  const culling = (layout?.nodes.length ?? 0) > CULL_ABOVE;
  const cullingRef = useRef(false);
  const frame = useRef(0);
  const updateWindow = useCallback((to?: View) => {
    const v = viewport.current;
    if (!v || !cullingRef.current) return;
    const r = v.visible(to);
    const w = windowRef.current;
    const mx = (r.x1 - r.x0) / 2;
    const my = (r.y1 - r.y0) / 2;
    if (w && r.x0 - w.x0 >= mx / 2 && w.x1 - r.x1 >= mx / 2 && r.y0 - w.y0 >= my / 2 && w.y1 - r.y1 >= my / 2) return;
    const next = { x0: r.x0 - 2 * mx, y0: r.y0 - 2 * my, x1: r.x1 + 2 * mx, y1: r.y1 + 2 * my };
    windowRef.current = next;
    setWindow(next);
  }, []);

  useEffect(() => {
    if (!host.current || !group.current) return;
    const v = new Viewport(host.current, group.current, () => {
      hideTooltip();
      if (!cullingRef.current || frame.current) return;
      frame.current = requestAnimationFrame(() => {
        frame.current = 0;
        updateWindow();
      });
    });
    viewport.current = v;
    return v.attach();
  }, []);

  useEffect(() => {
    fitted.current = false;
  }, [architecture, showShapeOps]);

  // A new layout: the view moves to it (and the drawn window with it) in
  // the same render that draws it.
  const place = (result: LayoutResult) => {
    const v = viewport.current;
    if (!v) return;
    v.setContent(result.width, result.height);
    const target = centreNext.current && result.nodes.find((n) => n.id === centreNext.current);
    if (target) {
      centreNext.current = null;
      v.centreOn(target.x, target.y);
    } else if (!fitted.current) {
      fitted.current = true;
      v.fitWidth();
    }
    cullingRef.current = result.nodes.length > CULL_ABOVE;
    windowRef.current = null;
    updateWindow(v.destinationView());
  };

  // A layer to bring into view: its groups open first, then, once it has a
  // node, the view centres on it (once per request).
  useEffect(() => {
    if (!focus || !grouped || centredNonce.current === focus.nonce) return;
    const path = ancestors(tree, focus.layer);
    if (path.some((g) => !isOpen(g))) {
      setGroupsOpen(
        path.filter((g) => !isOpen(g)).map((g) => g.path),
        true,
      );
      return;
    }
    const node = layout?.nodes.find((n) => n.id === focus.layer);
    if (!node) return;
    centredNonce.current = focus.nonce;
    viewport.current?.centreOn(node.x, node.y);
  }, [focus, layout, grouped, tree, isOpen]);

  const onActivate = useCallback((name: string) => {
    if (viewport.current?.consumeDrag()) return;
    toggleShown(name);
  }, []);

  const onToggle = useCallback(
    (path: string) => {
      if (viewport.current?.consumeDrag()) return;
      const g = tree.byPath.get(path);
      if (!g) return;
      const open = !isOpen(g);
      // Opened: centre on its first layer's node; closed: on the group.
      centreNext.current = open ? (g.all[0] ?? null) : groupId(path);
      if (open && centreNext.current) {
        // The first layer may sit in a group still closed inside it.
        let inner: Group | null = tree.groupOf.get(centreNext.current) ?? null;
        const closed: string[] = [];
        for (; inner && inner !== g; inner = inner.parent) if (!isOpen(inner)) closed.unshift(inner.path);
        if (closed.length) centreNext.current = groupId(closed[0]!);
      }
      setGroupsOpen([path], open);
    },
    [tree, isOpen],
  );

  const openAll = useCallback(() => {
    centreNext.current = null;
    fitted.current = false;
    setGroupsOpen([...tree.byPath.keys()], true);
  }, [tree]);
  const collapseAll = useCallback(() => {
    centreNext.current = null;
    fitted.current = false;
    setGroupsOpen([], false, true);
  }, []);

  // Expanded groups drawn as boxes around what is shown of them.
  const boxes = useMemo(() => (layout && grouped ? groupBoxes(tree, grouped, layout, isOpen) : []), [layout, grouped, tree, isOpen]);
  const placed = useMemo(() => new Set(grouped?.nodes ?? []), [grouped]);
  const cull = culling ? window_ : null;
  const drawnEdges = useMemo(() => {
    if (!layout) return [];
    if (!cull) return layout.edges;
    return layout.edges.filter((e) => {
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const p of e.points) {
        x0 = Math.min(x0, p.x);
        y0 = Math.min(y0, p.y);
        x1 = Math.max(x1, p.x);
        y1 = Math.max(y1, p.y);
      }
      return inRect(cull, x0, y0, x1, y1);
    });
  }, [layout, cull]);
  const count = graph?.layers.length ?? 0;
  const folded = showShapeOps ? 0 : shapeOps;
  const visibleNodes = grouped?.nodes.length ?? 0;
  const hoveredNode = hovered ? (grouped?.drawnAs.get(hovered) ?? null) : null;

  return (
    <div class="pane graph-pane" data-tour="graph">
      <div class="pane-toolbar">
        <span class="pane-title">Architecture</span>
        <span
          class="muted mono graph-count"
          data-testid="graph-count"
          title={folded ? `${folded} shape op${folded === 1 ? '' : 's'} folded into the edges` : undefined}
        >
          {count ? `${count} layers${visibleNodes < count ? ` · ${visibleNodes} nodes` : ''}` : ''}
        </span>
        <div class="toolbar-spacer" />
        <label
          class="switch graph-shape-ops"
          title={`Show pure shape ops (view, reshape, permute, transpose, select…; ${shapeOps} here) as nodes and cards; off, each producer is wired straight to its consumers`}
        >
          <input
            type="checkbox"
            data-testid="shape-ops-toggle"
            checked={showShapeOps}
            onChange={(e) => setShowShapeOps(e.currentTarget.checked)}
          />
          <span class="switch-track" aria-hidden="true" />
          Shape ops
        </label>
        <button class="icon-button" title="Zoom out" aria-label="Zoom out" onClick={() => viewport.current?.zoomBy(1 / 1.25)}>
          −
        </button>
        <button class="icon-button" title="Zoom in" aria-label="Zoom in" onClick={() => viewport.current?.zoomBy(1.25)}>
          +
        </button>
        <button class="chip-button" data-testid="graph-fit" title="Fit the whole network in the pane" onClick={() => viewport.current?.fit(true)}>
          Fit
        </button>
      </div>
      <div class="pane-toolbar graph-subbar">
        <GraphSearch names={names} />
        {tree.byPath.size > 0 && (
          <>
            <button class="icon-button" data-testid="graph-expand-all" title="Open every module group" aria-label="Open every module group" onClick={openAll}>
              ⊞
            </button>
            <button
              class="icon-button"
              data-testid="graph-collapse-all"
              title="Close the module groups back to the opening depth (forgets the groups you opened or closed)"
              aria-label="Close the module groups back to the opening depth"
              onClick={collapseAll}
            >
              ⊟
            </button>
          </>
        )}
      </div>
      <div
        class="graph-host"
        ref={host}
        data-testid="graph"
        data-nodes={layout ? layout.nodes.length : undefined}
        data-edges={layout ? layout.edges.length : undefined}
        data-culled={cull ? 'true' : undefined}
      >
        <svg class="graph-svg" width="100%" height="100%">
          <g ref={group}>
            {boxes.map((b) => (
              <GroupBox key={b.group.path} box={b} onToggle={onToggle} />
            ))}
            {layout && <Edges edges={drawnEdges} hovered={hoveredNode && placed.has(hoveredNode) ? hoveredNode : null} />}
            {layout?.nodes.map((n) => {
              if (!placed.has(n.id)) return null;
              if (cull && !inRect(cull, n.x - n.width / 2, n.y - n.height / 2, n.x + n.width / 2, n.y + n.height / 2)) return null;
              if (isGroupId(n.id)) {
                const g = tree.byPath.get(pathOfId(n.id));
                return g ? <GroupNode key={n.id} group={g} place={n} onToggle={onToggle} /> : null;
              }
              const layer = layers.get(n.id);
              return layer ? <GraphNode key={n.id} layer={layer} place={n} onActivate={onActivate} /> : null;
            })}
          </g>
        </svg>
        {!architecture?.captured && (
          <div class="graph-empty">{architecture?.reason ?? (architecture ? '' : 'Loading the architecture…')}</div>
        )}
        {layoutError && <div class="graph-empty error-text">{layoutError}</div>}
      </div>
      <GraphTooltip />
    </div>
  );
}

// Above this many nodes only those near the view are drawn.
const CULL_ABOVE = 300;

interface Rect {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

const inRect = (r: Rect, x0: number, y0: number, x1: number, y1: number) => x1 >= r.x0 && x0 <= r.x1 && y1 >= r.y0 && y0 <= r.y1;

interface Box {
  group: Group;
  x: number;
  y: number;
  width: number;
  height: number;
}

// Each open group with something drawn, boxed around its nodes; a group
// with open groups inside gets the wider margin, so headers do not overlap.
function groupBoxes(tree: GroupTree, grouped: GroupedGraph, layout: LayoutResult, isOpen: (g: Group) => boolean): Box[] {
  const at = new Map(layout.nodes.map((n) => [n.id, n]));
  const inner = new Map<Group, number>();
  const levels = (g: Group): number => {
    let known = inner.get(g);
    if (known !== undefined) return known;
    known = 0;
    for (const c of g.groups) if (isOpen(c)) known = Math.max(known, levels(c) + 1);
    inner.set(g, known);
    return known;
  };
  const out: Box[] = [];
  const walk = (g: Group) => {
    if (!isOpen(g)) return;
    let x0 = Infinity;
    let y0 = Infinity;
    let x1 = -Infinity;
    let y1 = -Infinity;
    const seen = new Set<string>();
    for (const name of g.all) {
      const id = grouped.drawnAs.get(name);
      if (!id || seen.has(id)) continue;
      seen.add(id);
      const n = at.get(id);
      if (!n) continue;
      x0 = Math.min(x0, n.x - n.width / 2);
      x1 = Math.max(x1, n.x + n.width / 2);
      y0 = Math.min(y0, n.y - n.height / 2);
      y1 = Math.max(y1, n.y + n.height / 2);
    }
    if (x0 !== Infinity) {
      const k = levels(g);
      const side = 8 + 5 * k;
      const top = 16 + 12 * k;
      out.push({ group: g, x: x0 - side, y: y0 - top, width: x1 - x0 + 2 * side, height: y1 - y0 + top + side });
    }
    for (const c of g.groups) walk(c);
  };
  for (const g of tree.roots) walk(g);
  return out;
}

function GroupBox({ box, onToggle }: { box: Box; onToggle(path: string): void }) {
  const { group } = box;
  return (
    <g class="group-box" data-testid={`graph-group-open-${group.path}`} data-group={group.path}>
      <rect class="group-box-frame" x={box.x} y={box.y} width={box.width} height={box.height} rx={8} />
      <text
        class="group-box-label"
        x={box.x + 6}
        y={box.y + 11}
        role="button"
        tabindex={0}
        aria-expanded={true}
        aria-label={`group ${group.path}, ${group.all.length} layers, open; close it`}
        data-testid={`graph-group-close-${group.path}`}
        onClick={() => onToggle(group.path)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' || e.key === ' ') {
            e.preventDefault();
            onToggle(group.path);
          }
        }}
      >
        <title>{`${group.path}: ${group.all.length} layers (click to close)`}</title>
        {`▾ ${group.path}`}
      </text>
    </g>
  );
}

const Edges = memo(function Edges({ edges, hovered }: { edges: PlacedEdge[]; hovered: string | null }) {
  return (
    <g class="edges">
      {edges.map((e) => (
        <path
          key={`${e.from}\u0000${e.to}`}
          class={hovered && (e.from === hovered || e.to === hovered) ? 'edge hovered' : 'edge'}
          d={edgePath(e.points)}
        />
      ))}
    </g>
  );
});

const ARROW_PX = 5;

// A smooth curve through dagre's bend points, ending in an open arrowhead
// drawn in the same path (SVG markers cost a paint chunk per edge).
function edgePath(points: { x: number; y: number }[]): string {
  if (points.length < 2) return '';
  const [first, ...rest] = points;
  let d = `M${first!.x},${first!.y}`;
  if (rest.length === 1) {
    d += `L${rest[0]!.x},${rest[0]!.y}`;
  } else {
    for (let i = 0; i < rest.length - 1; i++) {
      const p = rest[i]!;
      const next = rest[i + 1]!;
      const mid = i === rest.length - 2 ? next : { x: (p.x + next.x) / 2, y: (p.y + next.y) / 2 };
      d += `Q${p.x},${p.y} ${mid.x},${mid.y}`;
    }
  }
  const tip = points[points.length - 1]!;
  const from = points[points.length - 2]!;
  const len = Math.hypot(tip.x - from.x, tip.y - from.y) || 1;
  const ux = (tip.x - from.x) / len;
  const uy = (tip.y - from.y) / len;
  const bx = tip.x - ux * ARROW_PX * 1.6;
  const by = tip.y - uy * ARROW_PX * 1.6;
  d += `M${bx - uy * ARROW_PX},${by + ux * ARROW_PX}L${tip.x},${tip.y}L${bx + uy * ARROW_PX},${by - ux * ARROW_PX}`;
  return d;
}

declare global {
  interface Window {
    // The last layout shown: its size, the worker's time, the time from
    // asking for it to the frame after its nodes were rendered, and when
    // that frame came (performance.now()).
    __nansenseGraph?: { nodes: number; edges: number; workerMs: number; shownMs: number; shownAt: number; count: number };
  }
}
