// Three panes side by side with draggable dividers; either side pane can be
// put away. The side panes' widths
// live in CSS variables on the container, written directly while dragging
// (no re-render per pointer move) and remembered in localStorage.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

type Side = 'left' | 'right';

const STORAGE_KEY = 'nansense.panes';
const MIN_SIDE_PX = 160;
const MIN_CENTRE_PX = 320;
const KEY_STEP_PX = 24;

interface Widths {
  left: number;
  right: number;
}

function defaults(): Widths {
  // The input pane's default follows the original NaNsense 0.4.0 (Python, on
  // PyPI): clamp(11rem, 25vw, 18rem).
  const rem = parseFloat(getComputedStyle(document.documentElement).fontSize) || 16;
  const right = Math.min(18 * rem, Math.max(11 * rem, 0.25 * window.innerWidth));
  const left = Math.min(420, Math.max(240, 0.24 * window.innerWidth));
  return { left, right };
}

function load(): Widths {
  const d = defaults();
  try {
    const saved = JSON.parse(localStorage.getItem(STORAGE_KEY) ?? '{}') as Partial<Widths>;
    return {
      left: typeof saved.left === 'number' ? saved.left : d.left,
      right: typeof saved.right === 'number' ? saved.right : d.right,
    };
  } catch {
    return d;
  }
}

interface Props {
  left: ComponentChildren;
  centre: ComponentChildren;
  right: ComponentChildren;
  // A side pane put away (the top bar's toggles) leaves the grid with its
  // divider and gives its width to the centre; it stays mounted, so it comes
  // back as it was (the diagram's zoom, the input pane's choices).
  leftShown?: boolean;
  rightShown?: boolean;
}

export function Panes({ left, centre, right, leftShown = true, rightShown = true }: Props) {
  const container = useRef<HTMLDivElement>(null);
  const widths = useRef<Widths>(load());

  const apply = () => {
    const el = container.current;
    if (!el) return;
    // Keep the centre usable when the window shrinks below the saved sizes.
    const room = el.clientWidth - MIN_CENTRE_PX;
    const w = widths.current;
    const l = Math.max(MIN_SIDE_PX, Math.min(w.left, room - MIN_SIDE_PX));
    const r = Math.max(MIN_SIDE_PX, Math.min(w.right, room - l));
    el.style.setProperty('--left-width', `${Math.round(l)}px`);
    el.style.setProperty('--right-width', `${Math.round(r)}px`);
  };

  useEffect(() => {
    apply();
    const observer = new ResizeObserver(apply);
    if (container.current) observer.observe(container.current);
    return () => observer.disconnect();
  }, []);

  const save = () => localStorage.setItem(STORAGE_KEY, JSON.stringify(widths.current));

  const startDrag = (side: Side) => (e: PointerEvent) => {
    if (e.button !== 0) return;
    e.preventDefault();
    const handle = e.currentTarget as HTMLElement;
    handle.setPointerCapture(e.pointerId);
    const x0 = e.clientX;
    const w0 = widths.current[side];
    document.body.classList.add('resizing');
    const move = (m: PointerEvent) => {
      const dx = m.clientX - x0;
      widths.current = { ...widths.current, [side]: Math.max(MIN_SIDE_PX, side === 'left' ? w0 + dx : w0 - dx) };
      apply();
    };
    const up = () => {
      handle.removeEventListener('pointermove', move);
      handle.removeEventListener('pointerup', up);
      handle.removeEventListener('pointercancel', up);
      document.body.classList.remove('resizing');
      save();
    };
    handle.addEventListener('pointermove', move);
    handle.addEventListener('pointerup', up);
    handle.addEventListener('pointercancel', up);
  };

  const onKey = (side: Side) => (e: KeyboardEvent) => {
    const grow = side === 'left' ? 'ArrowRight' : 'ArrowLeft';
    const shrink = side === 'left' ? 'ArrowLeft' : 'ArrowRight';
    if (e.key !== grow && e.key !== shrink) return;
    e.preventDefault();
    const delta = e.key === grow ? KEY_STEP_PX : -KEY_STEP_PX;
    widths.current = { ...widths.current, [side]: Math.max(MIN_SIDE_PX, widths.current[side] + delta) };
    apply();
    save();
  };

  const handle = (side: Side) => (
    <div
      class="pane-handle"
      role="separator"
      aria-orientation="vertical"
      aria-label={side === 'left' ? 'Resize the architecture pane' : 'Resize the input pane'}
      tabIndex={0}
      data-testid={`resize-${side}`}
      onPointerDown={startDrag(side)}
      onKeyDown={onKey(side)}
    />
  );

  const slot = (shown: boolean, content: ComponentChildren) => (
    <div class="pane-slot" style={{ display: shown ? 'contents' : 'none' }}>
      {content}
    </div>
  );
  const closed = `${leftShown ? '' : ' left-closed'}${rightShown ? '' : ' right-closed'}`;
  return (
    <div class={`panes${closed}`} ref={container} data-testid="panes">
      {slot(
        leftShown,
        <>
          {left}
          {handle('left')}
        </>,
      )}
      {centre}
      {slot(
        rightShown,
        <>
          {handle('right')}
          {right}
        </>,
      )}
    </div>
  );
}
