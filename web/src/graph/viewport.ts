// Pan (drag) and zoom (wheel) of the diagram. The transform is written to
// the SVG group directly, never through a re-render, so a drag over hundreds
// of nodes stays at frame rate.

export interface View {
  x: number;
  y: number;
  k: number;
}

const MIN_ZOOM = 0.08;
const MAX_ZOOM = 3;
// Movement that turns a press into a drag (and swallows the click).
const DRAG_THRESHOLD_PX = 4;
const ANIMATION_MS = 260;

export class Viewport {
  private view: View = { x: 0, y: 0, k: 1 };
  private content = { width: 0, height: 0 };
  private animation = 0;
  private dragged = false;
  private destination: View | null = null;

  constructor(
    private readonly host: HTMLElement,
    private readonly target: SVGGElement,
    // Called whenever the view moves (anything anchored to it is stale).
    private readonly onMove: () => void = () => {},
  ) {}

  setContent(width: number, height: number): void {
    this.content = { width, height };
  }

  // The part of the content the pane shows (at `view`, by default the view
  // now), in content coordinates.
  visible(view: View = this.view): { x0: number; y0: number; x1: number; y1: number } {
    const { x, y, k } = view;
    return { x0: -x / k, y0: -y / k, x1: (this.host.clientWidth - x) / k, y1: (this.host.clientHeight - y) / k };
  }

  // Where the view is going: the end of an animation under way, else now.
  destinationView(): View {
    return this.destination ?? this.view;
  }

  // True right after a drag: the click that ends it is not a node click.
  consumeDrag(): boolean {
    const d = this.dragged;
    this.dragged = false;
    return d;
  }

  fit(animate = false): void {
    const { width, height } = this.content;
    const w = this.host.clientWidth;
    const h = this.host.clientHeight;
    if (!width || !height || !w || !h) return;
    const k = clamp(Math.min(w / width, h / height, 1.25), MIN_ZOOM, MAX_ZOOM);
    this.go({ k, x: (w - width * k) / 2, y: (h - height * k) / 2 }, animate);
  }

  // The first view of a graph: as wide as the pane allows (readable names
  // matter more than seeing a tall network whole), from the top.
  fitWidth(): void {
    const { width, height } = this.content;
    const w = this.host.clientWidth;
    const h = this.host.clientHeight;
    if (!width || !w) return;
    const k = clamp(Math.min(w / width, 1.25), 0.35, MAX_ZOOM);
    const y = height * k < h ? (h - height * k) / 2 : 0;
    this.go({ k, x: (w - width * k) / 2, y }, false);
  }

  centreOn(cx: number, cy: number): void {
    const { k } = this.view;
    this.go({ k, x: this.host.clientWidth / 2 - cx * k, y: this.host.clientHeight / 2 - cy * k }, true);
  }

  zoomBy(factor: number, px = this.host.clientWidth / 2, py = this.host.clientHeight / 2): void {
    const { x, y, k } = this.view;
    const k2 = clamp(k * factor, MIN_ZOOM, MAX_ZOOM);
    // Keep the content point under (px, py) in place.
    this.go({ k: k2, x: px - ((px - x) * k2) / k, y: py - ((py - y) * k2) / k }, false);
  }

  // Installs the pointer and wheel handlers; returns their removal.
  attach(): () => void {
    const host = this.host;
    let start: { px: number; py: number; view: View; id: number } | null = null;

    const onDown = (e: PointerEvent) => {
      if (e.button !== 0) return;
      start = { px: e.clientX, py: e.clientY, view: { ...this.view }, id: e.pointerId };
      this.dragged = false;
    };
    const onMove = (e: PointerEvent) => {
      if (!start || e.pointerId !== start.id) return;
      const dx = e.clientX - start.px;
      const dy = e.clientY - start.py;
      if (!this.dragged && Math.hypot(dx, dy) < DRAG_THRESHOLD_PX) return;
      if (!this.dragged) {
        this.dragged = true;
        host.setPointerCapture(e.pointerId);
        host.classList.add('panning');
      }
      this.go({ k: start.view.k, x: start.view.x + dx, y: start.view.y + dy }, false);
    };
    const onUp = (e: PointerEvent) => {
      if (!start || e.pointerId !== start.id) return;
      start = null;
      host.classList.remove('panning');
      if (host.hasPointerCapture(e.pointerId)) host.releasePointerCapture(e.pointerId);
    };
    const onWheel = (e: WheelEvent) => {
      e.preventDefault();
      const rect = host.getBoundingClientRect();
      // Line-mode wheels report lines, trackpads pixels.
      const delta = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
      this.zoomBy(Math.exp(-delta * 0.0015), e.clientX - rect.left, e.clientY - rect.top);
    };
    host.addEventListener('pointerdown', onDown);
    host.addEventListener('pointermove', onMove);
    host.addEventListener('pointerup', onUp);
    host.addEventListener('pointercancel', onUp);
    host.addEventListener('wheel', onWheel, { passive: false });
    return () => {
      cancelAnimationFrame(this.animation);
      host.removeEventListener('pointerdown', onDown);
      host.removeEventListener('pointermove', onMove);
      host.removeEventListener('pointerup', onUp);
      host.removeEventListener('pointercancel', onUp);
      host.removeEventListener('wheel', onWheel);
    };
  }

  private go(to: View, animate: boolean): void {
    cancelAnimationFrame(this.animation);
    this.destination = null;
    if (!animate || matchMedia('(prefers-reduced-motion: reduce)').matches) {
      this.apply(to);
      return;
    }
    this.destination = to;
    const from = { ...this.view };
    const t0 = performance.now();
    const tick = (now: number) => {
      const t = Math.min(1, (now - t0) / ANIMATION_MS);
      const e = 1 - (1 - t) ** 3;
      this.apply({ x: from.x + (to.x - from.x) * e, y: from.y + (to.y - from.y) * e, k: from.k + (to.k - from.k) * e });
      if (t < 1) this.animation = requestAnimationFrame(tick);
      else this.destination = null;
    };
    this.animation = requestAnimationFrame(tick);
  }

  private apply(v: View): void {
    this.view = v;
    this.onMove();
    this.target.setAttribute('transform', `translate(${v.x},${v.y}) scale(${v.k})`);
  }
}

function clamp(v: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, v));
}
