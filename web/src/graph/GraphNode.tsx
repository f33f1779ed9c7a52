// One layer in the diagram. Each node subscribes to its own highlight state,
// so hovering re-renders two nodes, not the whole graph.
import { memo } from 'preact/compat';
import type { Layer } from '../api/types';
import { isShown, setHovered, store } from '../state/app';
import { debugMarkOf, MARK_TEXT } from '../state/debug';
import { useSelector } from '../state/store';
import type { PlacedNode } from './layoutTypes';
import { nodeDetail } from './nodeText';
import { hideTooltip, showTooltip } from './tooltip';

interface Props {
  layer: Layer;
  place: PlacedNode;
  onActivate(layer: string): void;
}

export const GraphNode = memo(function GraphNode({ layer, place, onActivate }: Props) {
  const name = layer.name;
  const hovered = useSelector(store, (s) => s.hovered === name);
  const shown = useSelector(store, (s) => isShown(s.shown, name));
  const mark = useSelector(store, (s) => debugMarkOf(s, name));
  const { width: w, height: h } = place;
  const x = place.x - w / 2;
  const y = place.y - h / 2;
  const input = layer.role === 'input';
  const radius = input ? h / 2 : 6;
  // Absolute coordinates, no per-node transform: a transform per node makes
  // a paint chunk per node, and hundreds of those slow every frame of the
  // page (Chrome's layerization walks them all), not only the diagram's.
  const cx = place.x;
  return (
    <g
      class={`node role-${layer.role} ${hovered ? 'hovered' : ''} ${shown ? 'shown' : ''} ${mark ? `debug-${mark}` : ''}`}
      data-debug={mark ?? undefined}
      data-testid={`graph-node-${name}`}
      data-layer={name}
      role="button"
      tabindex={0}
      aria-pressed={shown}
      aria-label={`${name} (${layer.kind})${shown ? ', card shown' : ''}${mark ? `, ${MARK_TEXT[mark]}` : ''}`}
      onMouseEnter={(e) => {
        setHovered(name);
        showTooltip(name, e.currentTarget as SVGGElement);
      }}
      onMouseLeave={() => {
        setHovered(null);
        hideTooltip();
      }}
      onClick={() => onActivate(name)}
      onKeyDown={(e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          onActivate(name);
        }
      }}
    >
      {mark && mark !== 'propagator' && (
        <rect class="node-debug" x={x - 7} y={y - 7} width={w + 14} height={h + 14} rx={radius + 7} />
      )}
      <rect class="node-halo" x={x - 3.5} y={y - 3.5} width={w + 7} height={h + 7} rx={radius + 3.5} />
      <rect class="node-box" x={x} y={y} width={w} height={h} rx={radius} />
      <text class="node-name" x={cx} y={y + 15}>
        {name}
      </text>
      <text class="node-kind" x={cx} y={y + 28}>
        {nodeDetail(layer)}
      </text>
      {mark && mark !== 'propagator' && (
        <text class="node-debug-tag" x={x + w - 4} y={y - 10}>
          {mark === 'producer' ? 'produced here' : mark === 'entry' ? 'entered here' : 'worst'}
        </text>
      )}
    </g>
  );
});
