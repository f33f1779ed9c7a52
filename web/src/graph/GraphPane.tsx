// The left pane: the discovered architecture, laid out top to bottom.
import { memo } from 'preact/compat';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { setShowShapeOps, store, toggleShown } from '../state/app';
import { useSelector } from '../state/store';
import { foldShapeOps, isFolded, type FoldedGraph } from './fold';
import { GraphNode } from './GraphNode';
import { layoutGraph } from './layout';
import type { LayoutResult, PlacedEdge } from './layoutTypes';
import { GraphTooltip, hideTooltip } from './tooltip';
import { Viewport } from './viewport';

// Lay out again only when the graph shown changes, not on every refetch.
function signature(graph: FoldedGraph): string {
  return JSON.stringify([graph.layers.map((l) => [l.name, l.kind]), graph.edges.map((e) => [e.from, e.to])]);
}

export function GraphPane() {
  const architecture = useSelector(store, (s) => s.architecture);
  const showShapeOps = useSelector(store, (s) => s.showShapeOps);
  const focus = useSelector(store, (s) => (s.focus?.pane === 'graph' || s.focus?.pane === 'both' ? s.focus : null));
  const hovered = useSelector(store, (s) => s.hovered);
  const [layout, setLayout] = useState<LayoutResult | null>(null);
  const [layoutError, setLayoutError] = useState<string | null>(null);
  const host = useRef<HTMLDivElement>(null);
  const group = useRef<SVGGElement>(null);
  const viewport = useRef<Viewport | null>(null);
  const laidOut = useRef('');

  const graph = useMemo(
    () =>
      architecture?.captured
        ? foldShapeOps(architecture.layers, architecture.edges, (l) => isFolded(l, showShapeOps))
        : null,
    [architecture, showShapeOps],
  );
  const shapeOps = useMemo(() => architecture?.layers.filter((l) => isFolded(l, false)).length ?? 0, [architecture]);
  const sig = useMemo(() => (graph ? signature(graph) : ''), [graph]);
  useEffect(() => {
    if (!graph || sig === laidOut.current) return;
    laidOut.current = sig;
    let cancelled = false;
    layoutGraph(graph).then(
      (result) => {
        if (!cancelled) setLayout(result);
      },
      (e: Error) => setLayoutError(e.message),
    );
    return () => {
      cancelled = true;
      laidOut.current = '';
    };
    // Keyed by the signature: a refetch of the same graph does nothing.
  }, [sig]);

  useEffect(() => {
    if (!host.current || !group.current) return;
    const v = new Viewport(host.current, group.current, hideTooltip);
    viewport.current = v;
    return v.attach();
  }, []);

  useEffect(() => {
    if (!layout || !viewport.current) return;
    viewport.current.setContent(layout.width, layout.height);
    viewport.current.fitWidth();
  }, [layout]);

  useEffect(() => {
    if (!focus || !layout) return;
    const node = layout.nodes.find((n) => n.id === focus.layer);
    if (node) viewport.current?.centreOn(node.x, node.y);
  }, [focus, layout]);

  const onActivate = useCallback((name: string) => {
    if (viewport.current?.consumeDrag()) return;
    toggleShown(name);
  }, []);

  // Only the nodes shown: a layer folded away has none (the old layout's
  // nodes of it, until the new one comes, are skipped).
  const layers = useMemo(() => new Map((graph?.layers ?? []).map((l) => [l.name, l])), [graph]);
  const count = graph?.layers.length ?? 0;
  const folded = showShapeOps ? 0 : shapeOps;

  return (
    <div class="pane graph-pane">
      <div class="pane-toolbar">
        <span class="pane-title">Architecture</span>
        <span
          class="muted mono graph-count"
          data-testid="graph-count"
          title={folded ? `${folded} shape op${folded === 1 ? '' : 's'} folded into the edges` : undefined}
        >
          {count ? `${count} layers` : ''}
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
      <div class="graph-host" ref={host} data-testid="graph">
        <svg class="graph-svg" width="100%" height="100%">
          <g ref={group}>
            {layout && <Edges edges={layout.edges} hovered={hovered && layers.has(hovered) ? hovered : null} />}
            {layout?.nodes.map((n) => {
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
