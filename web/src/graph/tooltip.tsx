// The diagram's hover card: a layer's kind, output shape, dtype, parameter
// count and description.
import { useLayoutEffect, useRef } from 'preact/hooks';
import type { SnapshotParameter } from '../api/types';
import { store } from '../state/app';
import { createStore, useSelector } from '../state/store';
import { shapeText } from '../cards/geometry';
import { formatCount } from '../format';

interface TooltipState {
  layer: string | null;
  // The node's box in viewport coordinates.
  anchor: DOMRect | null;
}

const tooltip = createStore<TooltipState>({ layer: null, anchor: null });

export function showTooltip(layer: string, node: SVGGElement): void {
  tooltip.set({ layer, anchor: node.getBoundingClientRect() });
}

export function hideTooltip(): void {
  if (tooltip.get().layer !== null) tooltip.set({ layer: null, anchor: null });
}

const GAP_PX = 8;

// "2 tensors, 416 values: features.0.weight [16,1,3,3], features.0.bias [16]"
function parameterText(names: string[], sizes: SnapshotParameter[] | undefined): string {
  if (!names.length) return 'none';
  const byName = new Map((sizes ?? []).map((p) => [p.name, p.weight]));
  let total = 0;
  const parts = names.map((n) => {
    const w = byName.get(n);
    total += w?.numel ?? 0;
    return w ? `${n} [${w.shape.join(',')}]` : n;
  });
  const count = total ? `, ${formatCount(total)} values` : '';
  return `${names.length} tensor${names.length > 1 ? 's' : ''}${count}: ${parts.join(', ')}`;
}

export function GraphTooltip() {
  const { layer: name, anchor } = useSelector(tooltip, (s) => s);
  const layer = useSelector(store, (s) => s.architecture?.layers.find((l) => l.name === name) ?? null);
  const sizes = useSelector(store, (s) => s.snapshot?.parameters);
  const ref = useRef<HTMLDivElement>(null);

  // Placed after measuring: right of the node when it fits, else left.
  useLayoutEffect(() => {
    const el = ref.current;
    if (!el || !anchor) return;
    const box = el.getBoundingClientRect();
    let left = anchor.right + GAP_PX;
    if (left + box.width > window.innerWidth - GAP_PX) left = Math.max(GAP_PX, anchor.left - GAP_PX - box.width);
    const top = Math.min(Math.max(GAP_PX, anchor.top), window.innerHeight - box.height - GAP_PX);
    el.style.transform = `translate(${Math.round(left)}px, ${Math.round(top)}px)`;
  }, [anchor, layer]);

  if (!layer || !anchor) return null;
  return (
    <div class="tooltip" ref={ref} role="tooltip" data-testid="graph-tooltip">
      <div class="tooltip-title mono">{layer.name}</div>
      <dl>
        <dt>kind</dt>
        <dd>{layer.kind}</dd>
        {layer.module && layer.module !== layer.name && (
          <>
            <dt>module</dt>
            <dd class="mono">{layer.module}</dd>
          </>
        )}
        <dt>output</dt>
        <dd class="mono">{layer.output_shape.length ? `[${layer.output_shape.join(', ')}]` : shapeText([])}</dd>
        <dt>dtype</dt>
        <dd class="mono">{layer.dtype}</dd>
        <dt>parameters</dt>
        <dd class="mono">{parameterText(layer.parameters, sizes)}</dd>
        {layer.ops.length > 0 && (
          <>
            <dt>ops</dt>
            <dd class="mono">{layer.ops.join(', ')}</dd>
          </>
        )}
      </dl>
      {layer.description && <div class="tooltip-desc mono">{layer.description}</div>}
    </div>
  );
}
