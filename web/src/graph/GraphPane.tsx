// The left pane: the discovered architecture, laid out top to bottom, its
// layers in module groups (groups.ts) that open and close.
import type { RefObject } from 'preact';
import { useRef } from 'preact/hooks';
import { setShowShapeOps, store } from '../state/app';
import { useSelector } from '../state/store';
import { GraphDrawing } from './GraphDrawing';
import { GraphSearch } from './GraphSearch';
import { GraphTooltip } from './tooltip';
import { useGraphLayout } from './useGraphLayout';
import { CULL_ABOVE, useFocusCentre, useGraphView, useGroupToggles } from './useGraphView';
import { useShownGraph, type ShownGraph } from './useShownGraph';
import type { Viewport } from './viewport';

export function GraphPane() {
  const shown = useShownGraph();
  const focus = useSelector(store, (s) => (s.focus?.pane === 'graph' || s.focus?.pane === 'both' ? s.focus : null));
  const hovered = useSelector(store, (s) => s.hovered);
  const host = useRef<HTMLDivElement>(null);
  const group = useRef<SVGGElement>(null);
  const view = useGraphView(host, group, shown);
  const { layout, layoutError } = useGraphLayout(shown.request, shown.sig, view.place);
  useFocusCentre(view, focus, shown, layout);
  const toggles = useGroupToggles(view, shown);
  const { architecture, grouped } = shown;
  const culling = (layout?.nodes.length ?? 0) > CULL_ABOVE;
  const cull = culling ? view.window : null;

  return (
    <div class="pane graph-pane" data-tour="graph">
      <GraphToolbar shown={shown} viewport={view.viewport} />
      <div class="pane-toolbar graph-subbar">
        <GraphSearch names={shown.names} />
        {shown.tree.byPath.size > 0 && (
          <>
            <button class="icon-button" data-testid="graph-expand-all" title="Open every module group" aria-label="Open every module group" onClick={toggles.openAll}>
              ⊞
            </button>
            <button
              class="icon-button"
              data-testid="graph-collapse-all"
              title="Close the module groups back to the opening depth (forgets the groups you opened or closed)"
              aria-label="Close the module groups back to the opening depth"
              onClick={toggles.collapseAll}
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
            <GraphDrawing
              layout={layout}
              grouped={grouped}
              tree={shown.tree}
              layers={shown.layers}
              isOpen={shown.isOpen}
              cull={cull}
              hovered={hovered}
              onToggle={toggles.onToggle}
              onActivate={toggles.onActivate}
            />
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

// The title, the layer count, the shape-ops switch and zoom.
function GraphToolbar({ shown, viewport }: { shown: ShownGraph; viewport: RefObject<Viewport | null> }) {
  const { graph, grouped, showShapeOps, shapeOps } = shown;
  const count = graph?.layers.length ?? 0;
  const folded = showShapeOps ? 0 : shapeOps;
  const visibleNodes = grouped?.nodes.length ?? 0;
  return (
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
  );
}
