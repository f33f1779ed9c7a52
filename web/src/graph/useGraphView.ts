// The diagram's view: the pan/zoom viewport over the SVG, where a new layout
// puts the view (fit the width, or centre on what was just opened or asked
// for), and, for big diagrams, the window of the layout that is drawn.
import type { RefObject } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { setGroupsOpen, toggleShown, type FocusRequest } from '../state/app';
import { ancestors, groupId, type Group } from './groups';
import type { LayoutResult } from './layoutTypes';
import type { ShownGraph } from './useShownGraph';
import { hideTooltip } from './tooltip';
import { Viewport, type View } from './viewport';

// Above this many nodes only those near the view are drawn.
export const CULL_ABOVE = 300;

export interface Rect {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

export const inRect = (r: Rect, x0: number, y0: number, x1: number, y1: number) => x1 >= r.x0 && x0 <= r.x1 && y1 >= r.y0 && y0 <= r.y1;

export interface GraphView {
  viewport: RefObject<Viewport | null>;
  // What to centre on once a layout holding it comes (a toggled group, a
  // revealed layer); null: fit the width, as for a new graph.
  centreNext: RefObject<string | null>;
  // Whether the current graph's width was fitted already.
  fitted: RefObject<boolean>;
  // The part of the layout drawn while culling (a screen's margin around the view).
  window: Rect | null;
  // Moves the view to a new layout (and the drawn window with it).
  place: (result: LayoutResult) => void;
}

// The viewport goes on the host and its SVG group once; a new graph is
// fitted to the width again.
export function useGraphView(
  host: RefObject<HTMLDivElement | null>,
  group: RefObject<SVGGElement | null>,
  shown: Pick<ShownGraph, 'architecture' | 'showShapeOps'>,
): GraphView {
  const viewport = useRef<Viewport | null>(null);
  const centreNext = useRef<string | null>(null);
  const fitted = useRef(false);
  // Big diagrams draw only the nodes and edges near the view (a screen's
  // margin around it), so showing 1,000 layers does not build 1,000 nodes'
  // SVG; the window moves when the view nears its edge.
  const [window_, setWindow] = useState<Rect | null>(null);
  const windowRef = useRef<Rect | null>(null);
  const culling = useRef(false);
  const frame = useRef(0);
  const updateWindow = useCallback((to?: View) => {
    const v = viewport.current;
    if (!v || !culling.current) return;
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
      if (!culling.current || frame.current) return;
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
  }, [shown.architecture, shown.showShapeOps]);

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
    culling.current = result.nodes.length > CULL_ABOVE;
    windowRef.current = null;
    updateWindow(v.destinationView());
  };

  return { viewport, centreNext, fitted, window: window_, place };
}

// A layer to bring into view: its groups open first, then, once it has a
// node, the view centres on it (once per request).
export function useFocusCentre(view: GraphView, focus: FocusRequest | null, shown: ShownGraph, layout: LayoutResult | null): void {
  const centredNonce = useRef(0);
  const { grouped, tree, isOpen } = shown;
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
    view.viewport.current?.centreOn(node.x, node.y);
  }, [focus, layout, grouped, tree, isOpen]);
}

export interface GroupToggles {
  // A layer node clicked (not dragged): its card shown or hidden.
  onActivate: (name: string) => void;
  // A group opened or closed; the view centres on what it became.
  onToggle: (path: string) => void;
  openAll: () => void;
  collapseAll: () => void;
}

export function useGroupToggles(view: GraphView, shown: ShownGraph): GroupToggles {
  const { tree, isOpen } = shown;
  const { viewport, centreNext, fitted } = view;
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

  return { onActivate, onToggle, openAll, collapseAll };
}
