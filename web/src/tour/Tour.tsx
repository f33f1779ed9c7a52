// The guided tour of the page: a small floating box beside a ring around
// each step's element, stepping with Next / Back or the keyboard (→ or
// Enter: next, ←: back, Esc: close). It never blocks the page: there is no
// backdrop, the ring lets clicks through, and nothing waits on it, so the
// controls stay live while training runs. A step whose element is missing
// (a control this session does not show) is skipped with a console warning.
// On a locked session (a playground) it starts by itself once per browser
// and page (remembered in localStorage); the top bar's ? replays it.
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { currentPage, type Page } from '../links';
import { store } from '../state/app';
import { isLocked } from '../state/locked';
import { createStore, useSelector } from '../state/store';
import { stepsFor, TOURS, type TourStep } from './tours';

interface TourState {
  // The page whose tour is showing, or null.
  open: Page | null;
  locked: boolean;
  index: number;
}

export const tourStore = createStore<TourState>({ open: null, locked: false, index: 0 });

const SEEN_KEY = 'nansense.tourSeen';

function seenPages(): Record<string, boolean> {
  try {
    const v = JSON.parse(localStorage.getItem(SEEN_KEY) ?? '{}') as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, boolean>) : {};
  } catch {
    return {};
  }
}

function markSeen(page: Page): void {
  try {
    localStorage.setItem(SEEN_KEY, JSON.stringify({ ...seenPages(), [page]: true }));
  } catch {
    // A full or blocked storage: the tour may start again next time.
  }
}

export function targetOf(step: TourStep): HTMLElement | null {
  for (const el of document.querySelectorAll<HTMLElement>(`[data-tour="${step.target}"]`)) {
    // The first one that is drawn (not display:none, not folded away).
    if (el.getClientRects().length > 0) return el;
  }
  return null;
}

// The nearest step from `from` in direction `dir` whose element is on the
// page; the ones passed over are reported in the console.
function findStep(steps: TourStep[], from: number, dir: 1 | -1, page: Page): number | null {
  for (let i = from; i >= 0 && i < steps.length; i += dir) {
    if (targetOf(steps[i]!)) return i;
    console.warn(
      `nansense tour (${page}): step ${i + 1} of ${steps.length} skipped: no element [data-tour="${steps[i]!.target}"] on this page`,
    );
  }
  return null;
}

export function startTour(page: Page = currentPage()): void {
  const locked = isLocked(store.get().status);
  const steps = stepsFor(page, locked);
  const first = findStep(steps, 0, 1, page);
  if (first === null) {
    tourStore.set({ open: null });
    return;
  }
  tourStore.set({ open: page, locked, index: first });
}

export function closeTour(): void {
  if (tourStore.get().open) tourStore.set({ open: null });
}

export function moveTour(dir: 1 | -1): void {
  const { open, locked, index } = tourStore.get();
  if (!open) return;
  const steps = stepsFor(open, locked);
  const next = findStep(steps, index + dir, dir, open);
  if (next !== null) tourStore.set({ index: next });
  else if (dir === 1) closeTour(); // past the last step: done
}

// Starts the page's tour by itself once on a locked session, when the page
// has drawn the element the tour waits for.
function useAutoStart(page: Page): void {
  const locked = useSelector(store, (s) => isLocked(s.status));
  useEffect(() => {
    if (!locked || seenPages()[page]) return;
    const ready = TOURS[page].ready;
    let started = false;
    const tryStart = () => {
      if (started || !document.querySelector(`[data-tour="${ready}"]`)) return;
      started = true;
      observer.disconnect();
      markSeen(page);
      if (!tourStore.get().open) startTour(page);
    };
    const observer = new MutationObserver(tryStart);
    observer.observe(document.body, { childList: true, subtree: true });
    tryStart();
    return () => observer.disconnect();
  }, [locked, page]);
}

export function TourHost() {
  const page = currentPage();
  useAutoStart(page);
  const t = useSelector(tourStore, (s) => s);
  if (!t.open) return null;
  const steps = stepsFor(t.open, t.locked);
  const step = steps[t.index];
  if (!step) return null;
  return <TourBox page={t.open} step={step} index={t.index} count={steps.length} />;
}

interface Rect {
  top: number;
  left: number;
  width: number;
  height: number;
}

const RING_PAD = 4;
const BOX_W = 300;
const GAP = 10;

function rectOf(el: HTMLElement): Rect {
  const r = el.getBoundingClientRect();
  return { top: r.top, left: r.left, width: r.width, height: r.height };
}

const sameRect = (a: Rect | null, b: Rect) =>
  a != null && a.top === b.top && a.left === b.left && a.width === b.width && a.height === b.height;

// The step's element's place on screen, followed through scrolling, resizing
// and the page's own re-layout.
function useTargetRect(step: TourStep): Rect | null {
  const [rect, setRect] = useState<Rect | null>(null);
  useLayoutEffect(() => {
    let el = targetOf(step);
    if (!el) {
      // Gone since it was chosen (the page re-rendered): step on.
      moveTour(1);
      return;
    }
    el.scrollIntoView({ block: 'nearest', inline: 'nearest' });
    let current: Rect | null = null;
    let frame = 0;
    const update = () => {
      frame = 0;
      if (!el?.isConnected) el = targetOf(step);
      if (!el) return;
      const next = rectOf(el);
      if (!sameRect(current, next)) setRect((current = next));
    };
    const later = () => {
      if (!frame) frame = requestAnimationFrame(update);
    };
    update();
    const resize = new ResizeObserver(later);
    resize.observe(el);
    resize.observe(document.body);
    const mutations = new MutationObserver(later);
    mutations.observe(document.body, { childList: true, subtree: true, attributes: true, attributeFilter: ['class', 'style'] });
    window.addEventListener('scroll', later, { capture: true, passive: true });
    window.addEventListener('resize', later);
    return () => {
      if (frame) cancelAnimationFrame(frame);
      resize.disconnect();
      mutations.disconnect();
      window.removeEventListener('scroll', later, { capture: true });
      window.removeEventListener('resize', later);
    };
  }, [step]);
  return rect;
}

// Below the element when it fits, else above, else beside it; kept on screen.
function boxPlace(r: Rect, boxHeight: number): { top: number; left: number; arrow: 'up' | 'down' | 'none' } {
  const vw = window.innerWidth;
  const vh = window.innerHeight;
  const left = Math.max(8, Math.min(r.left + r.width / 2 - BOX_W / 2, vw - BOX_W - 8));
  if (r.top + r.height + GAP + boxHeight + 8 <= vh) return { top: r.top + r.height + GAP, left, arrow: 'up' };
  if (r.top - GAP - boxHeight >= 8) return { top: r.top - GAP - boxHeight, left, arrow: 'down' };
  return { top: Math.max(8, vh - boxHeight - 8), left, arrow: 'none' };
}

function editable(el: EventTarget | null): boolean {
  if (!(el instanceof HTMLElement)) return false;
  return el.isContentEditable || el instanceof HTMLInputElement || el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement;
}

function TourBox({ page, step, index, count }: { page: Page; step: TourStep; index: number; count: number }) {
  const rect = useTargetRect(step);
  const box = useRef<HTMLDivElement>(null);
  const [boxHeight, setBoxHeight] = useState(120);

  useLayoutEffect(() => {
    const h = box.current?.offsetHeight;
    if (h && h !== boxHeight) setBoxHeight(h);
  });

  // Focus moves to the box when the tour opens (keys reach it at once), and
  // back where it was when it closes.
  useEffect(() => {
    const before = document.activeElement as HTMLElement | null;
    box.current?.focus({ preventScroll: true });
    return () => {
      if (before?.isConnected && document.activeElement === document.body) before.focus({ preventScroll: true });
    };
  }, []);

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey) return;
      // Another dialog open over the page has the keys.
      if (document.querySelector('dialog[open]')) return;
      const inBox = box.current?.contains(e.target as Node) ?? false;
      // The steps' keys are the tour's while it has the focus (or nothing
      // has): elsewhere they belong to the control being used.
      const ours = inBox || e.target === document.body || e.target === document.documentElement;
      if (e.key === 'Escape') {
        if (editable(e.target) && !inBox) return;
        e.preventDefault();
        closeTour();
      } else if (!ours) {
        // Not the tour's key.
      } else if (e.key === 'ArrowRight' || (e.key === 'Enter' && !(e.target instanceof HTMLButtonElement))) {
        e.preventDefault();
        moveTour(1);
      } else if (e.key === 'ArrowLeft') {
        e.preventDefault();
        moveTour(-1);
      }
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, []);

  const place = rect ? boxPlace(rect, boxHeight) : null;
  const last = index === count - 1;
  return (
    <div class="tour" data-testid="tour" data-page={page}>
      {rect && (
        <div
          class="tour-ring"
          data-testid="tour-ring"
          aria-hidden="true"
          style={{
            top: `${rect.top - RING_PAD}px`,
            left: `${rect.left - RING_PAD}px`,
            width: `${rect.width + 2 * RING_PAD}px`,
            height: `${rect.height + 2 * RING_PAD}px`,
          }}
        />
      )}
      <div
        ref={box}
        class={`tour-box tour-arrow-${place?.arrow ?? 'none'}`}
        data-testid="tour-box"
        data-target={step.target}
        data-step={index + 1}
        data-count={count}
        role="dialog"
        aria-modal="false"
        aria-label={`${TOURS[page].title} tour, step ${index + 1} of ${count}`}
        aria-describedby="tour-text"
        tabIndex={-1}
        style={place ? { top: `${place.top}px`, left: `${place.left}px` } : { top: '0px', left: '0px', opacity: 0 }}
      >
        <p class="tour-text" id="tour-text" data-testid="tour-text">
          {step.text}
        </p>
        <div class="tour-actions">
          <span class="tour-count mono" data-testid="tour-count">
            {index + 1} / {count}
          </span>
          <button class="btn btn-quiet btn-small" data-testid="tour-close" onClick={closeTour} title="Close the tour (Esc)">
            Close
          </button>
          <button class="btn btn-quiet btn-small" data-testid="tour-back" disabled={index === 0} onClick={() => moveTour(-1)} title="Back (←)">
            Back
          </button>
          <button class="btn btn-tour btn-small" data-testid="tour-next" onClick={() => moveTour(1)} title={last ? 'Finish (Enter)' : 'Next (→ or Enter)'}>
            {last ? 'Done' : 'Next'}
          </button>
        </div>
      </div>
    </div>
  );
}
