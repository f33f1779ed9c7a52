// Asks the layout worker to place an architecture's nodes; one worker for the
// page, and only the latest request's answer is used.
import type { LayoutRequest, LayoutResult } from './layoutTypes';

export const NODE_HEIGHT = 36;
const CHAR_PX = 6.8;
const NODE_PAD_PX = 22;
const MIN_NODE_WIDTH = 64;

let worker: Worker | null = null;
let nextId = 0;
const waiting = new Map<number, { resolve: (r: LayoutResult) => void; reject: (e: Error) => void }>();

function getWorker(): Worker {
  if (!worker) {
    worker = new Worker(new URL('./layout.worker.ts', import.meta.url), { type: 'module' });
    worker.onmessage = (e: MessageEvent<LayoutResult>) => {
      waiting.get(e.data.id)?.resolve(e.data);
      waiting.delete(e.data.id);
    };
    worker.onerror = (e) => {
      for (const w of waiting.values()) w.reject(new Error(`graph layout failed: ${e.message}`));
      waiting.clear();
    };
  }
  return worker;
}

// Node width fits the longer of its two lines in the mono font (the detail
// line is in a smaller sans font, about 0.85 of a mono character each).
export function nodeWidth(name: string, detail: string): number {
  return Math.max(MIN_NODE_WIDTH, Math.ceil(Math.max(name.length, detail.length * 0.85) * CHAR_PX + NODE_PAD_PX));
}

// The nodes and edges the diagram shows (layers and collapsed groups).
export function layoutGraph(graph: Omit<LayoutRequest, 'id'>): Promise<LayoutResult> {
  const id = ++nextId;
  const request: LayoutRequest = { id, ...graph };
  return new Promise((resolve, reject) => {
    waiting.set(id, { resolve, reject });
    getWorker().postMessage(request);
  });
}
