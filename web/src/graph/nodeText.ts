// A diagram node's text, shared by the node and the layout that sizes it.
import type { Layer } from '../api/types';

// The second line: what the layer is and what it outputs per sample.
export function nodeDetail(layer: Layer): string {
  const shape = layer.output_shape.slice(1);
  const kind = layer.role === 'input' ? 'input' : layer.kind;
  return shape.length ? `${kind} · ${shape.join('×')}` : kind;
}
