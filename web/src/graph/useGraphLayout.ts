// The diagram's layout, computed in the worker (layout.ts) whenever the graph
// shown changes: `place` moves the view to each new one before it is drawn.
import { useEffect, useRef, useState } from 'preact/hooks';
import { layoutGraph } from './layout';
import type { LayoutResult } from './layoutTypes';
import type { GraphRequest } from './useShownGraph';

export interface GraphLayout {
  layout: LayoutResult | null;
  layoutError: string | null;
}

// `sig` changes exactly when `request` does in what it lays out (its nodes
// and edges): a refetch of the same graph does nothing.
export function useGraphLayout(request: GraphRequest | null, sig: string, place: (result: LayoutResult) => void): GraphLayout {
  const [layout, setLayout] = useState<LayoutResult | null>(null);
  const [layoutError, setLayoutError] = useState<string | null>(null);
  const laidOut = useRef('');
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
  return { layout, layoutError };
}

declare global {
  interface Window {
    // The last layout shown: its size, the worker's time, the time from
    // asking for it to the frame after its nodes were rendered, and when
    // that frame came (performance.now()).
    __nansenseGraph?: { nodes: number; edges: number; workerMs: number; shownMs: number; shownAt: number; count: number };
  }
}
