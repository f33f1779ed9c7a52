// Marks the page once every visible strip shows the latest snapshot, for the
// latency benchmark and the browser tests: body[data-rendered-sequence] and
// window.__nansense = {renderedSequence, renderedAtMs, paintedAtMs}.
// renderedAtMs: every visible picture is decoded and handed to its strip;
// paintedAtMs: the frame that draws them has been produced as well.
import { store } from './app';

interface StripReport {
  visible: boolean;
  // The snapshot the strip has finished with (image decoded, or nothing to
  // draw at that snapshot), as (generation, sequence).
  generation: number;
  sequence: number;
}

declare global {
  interface Window {
    __nansense?: { renderedSequence: number; renderedAtMs: number; paintedAtMs?: number };
  }
}

const strips = new Map<symbol, StripReport>();
let marked = '';
let scheduled = false;

export function reportStrip(id: symbol, report: StripReport): void {
  strips.set(id, report);
  schedule();
}

export function forgetStrip(id: symbol): void {
  strips.delete(id);
  schedule();
}

// Strips report in bursts (one per image); check once per burst.
function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  queueMicrotask(() => {
    scheduled = false;
    check();
  });
}

function check(): void {
  const { generation, sequence, snapshot } = store.get();
  if (sequence === 0 || snapshot?.sequence !== sequence) return;
  const key = `${generation}|${sequence}`;
  if (key === marked) return;
  for (const s of strips.values()) {
    if (s.visible && (s.generation !== generation || s.sequence < sequence)) return;
  }
  marked = key;
  document.body.dataset.renderedSequence = String(sequence);
  const mark: NonNullable<Window['__nansense']> = { renderedSequence: sequence, renderedAtMs: Date.now() };
  window.__nansense = mark;
  // The animation frame callback runs before that frame's layout and paint;
  // a task queued from it runs once the frame is out.
  requestAnimationFrame(() => setTimeout(() => (mark.paintedAtMs = Date.now()), 0));
}

// With no strip visible the snapshot is shown as soon as its JSON is in.
store.subscribe(schedule);
