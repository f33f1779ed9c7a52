// What the diagram draws inside its pan/zoom group: the boxes of open module
// groups, the edges, and the layer and closed-group nodes; while culling only
// those inside the drawn window.
import { memo } from 'preact/compat';
import { useMemo } from 'preact/hooks';
import type { Layer } from '../api/types';
import { GraphNode } from './GraphNode';
import { type Group, type GroupedGraph, type GroupTree, isGroupId, pathOfId } from './groups';
import { GroupNode } from './GroupNode';
import type { LayoutResult, PlacedEdge } from './layoutTypes';
import { inRect, type Rect } from './useGraphView';

interface DrawingProps {
  layout: LayoutResult | null;
  grouped: GroupedGraph | null;
  tree: GroupTree;
  layers: Map<string, Layer>;
  isOpen: (g: Group) => boolean;
  // The drawn window while culling; null: everything is drawn.
  cull: Rect | null;
  hovered: string | null;
  onToggle: (path: string) => void;
  onActivate: (name: string) => void;
}

export function GraphDrawing({ layout, grouped, tree, layers, isOpen, cull, hovered, onToggle, onActivate }: DrawingProps) {
  // Expanded groups drawn as boxes around what is shown of them.
  const boxes = useMemo(() => (layout && grouped ? groupBoxes(tree, grouped, layout, isOpen) : []), [layout, grouped, tree, isOpen]);
  const placed = useMemo(() => new Set(grouped?.nodes ?? []), [grouped]);
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
  const hoveredNode = hovered ? (grouped?.drawnAs.get(hovered) ?? null) : null;

  return (
    <>
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
    </>
  );
}

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
