// A collapsed module group in the diagram: one node for every layer under
// it, with their count, how many have a card, and the strongest numerical
// error mark among them. Click or Enter/Space opens it.
import { memo } from 'preact/compat';
import { isShown, store, type AppState } from '../state/app';
import { debugMarkOf, MARK_TEXT, type DebugMark } from '../state/debug';
import { useSelector } from '../state/store';
import type { Group } from './groups';
import type { PlacedNode } from './layoutTypes';

interface Props {
  group: Group;
  place: PlacedNode;
  onToggle(path: string): void;
}

const members = new WeakMap<Group, Set<string>>();
function memberSet(g: Group): Set<string> {
  let s = members.get(g);
  if (!s) members.set(g, (s = new Set(g.all)));
  return s;
}

const STRENGTH: Record<DebugMark, number> = { producer: 4, entry: 3, worst: 2, propagator: 1 };

// The strongest mark on a layer of the group: the producer's group shows it.
export function groupMark(s: AppState, g: Group): DebugMark | null {
  let best: DebugMark | null = null;
  for (const name of g.all) {
    const m = debugMarkOf(s, name);
    if (m && (!best || STRENGTH[m] > STRENGTH[best])) best = m;
  }
  return best;
}

export function groupDetail(g: Group): string {
  return `${g.all.length} layers`;
}

export const GroupNode = memo(function GroupNode({ group, place, onToggle }: Props) {
  const { path } = group;
  const hovered = useSelector(store, (s) => s.hovered != null && memberSet(group).has(s.hovered));
  const shown = useSelector(store, (s) => group.all.reduce((n, l) => n + (isShown(s.shown, l) ? 1 : 0), 0));
  const mark = useSelector(store, (s) => groupMark(s, group));
  const { width: w, height: h } = place;
  const x = place.x - w / 2;
  const y = place.y - h / 2;
  const detail = `${groupDetail(group)}${shown ? ` · ${shown} shown` : ''}`;
  return (
    <g
      class={`node group ${hovered ? 'hovered' : ''} ${shown ? 'shown' : ''} ${mark ? `debug-${mark}` : ''}`}
      data-debug={mark ?? undefined}
      data-testid={`graph-group-${path}`}
      data-group={path}
      data-count={group.all.length}
      role="button"
      tabindex={0}
      aria-expanded={false}
      aria-label={`group ${path}, ${group.all.length} layers, collapsed${mark ? `; ${MARK_TEXT[mark]}` : ''}`}
      onClick={() => onToggle(path)}
      onKeyDown={(e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          onToggle(path);
        }
      }}
    >
      <title>{`${path}: ${group.all.length} layers (click to open)`}</title>
      {mark && mark !== 'propagator' && (
        <rect class="node-debug" x={x - 7} y={y - 7} width={w + 14} height={h + 14} rx={13} />
      )}
      <rect class="node-stack" x={x + 4} y={y + 4} width={w} height={h} rx={6} />
      <rect class="node-halo" x={x - 3.5} y={y - 3.5} width={w + 7} height={h + 7} rx={9.5} />
      <rect class="node-box" x={x} y={y} width={w} height={h} rx={6} />
      <text class="node-name" x={place.x} y={y + 15}>
        {`▸ ${path}`}
      </text>
      <text class="node-kind" x={place.x} y={y + 28}>
        {detail}
      </text>
      {mark && mark !== 'propagator' && (
        <text class="node-debug-tag" x={x + w - 4} y={y - 10}>
          {mark === 'producer' ? 'produced inside' : mark === 'entry' ? 'entered inside' : 'worst inside'}
        </text>
      )}
    </g>
  );
});
