// The recordings the session has, for the Share dialog (list_recordings),
// read defensively: a failed request (a page served by another build,
// NANSENSE_WEB_DIR) or a reply of another shape leaves the dialog without a
// Recordings section instead of failing it.
import { pageToken } from '../api/client';
import { routes } from '../api/routes';

export const RECORDINGS_PATH = routes.list_recordings.path;

export interface SharedRecording {
  label: string;
  // An address the browser can open (absolute), when the server gives one;
  // else the file's path on the machine that runs the training.
  link: string;
  kind: 'url' | 'path';
  // Still being written (an active recording's file).
  active: boolean;
}

const text = (v: unknown): string | null => (typeof v === 'string' && v.length > 0 ? v : null);

// Every file named in the reply (list_recordings: `saved` recordings, then
// the active `recordings`; each with `files`, as paths or as objects with a
// `path` or `url`). Anything unexpected is passed over.
export function recordingsFrom(reply: unknown): SharedRecording[] {
  if (!reply || typeof reply !== 'object') return [];
  const r = reply as Record<string, unknown>;
  const out: SharedRecording[] = [];
  const seen = new Set<string>();
  const add = (label: string, link: string | null, kind: SharedRecording['kind'], active: boolean) => {
    if (!link || seen.has(link)) return;
    seen.add(link);
    out.push({ label, link: kind === 'url' ? new URL(link, location.href).href : link, kind, active });
  };
  const file = (label: string, f: unknown, active: boolean) => {
    if (typeof f === 'string') return add(label, text(f), 'path', active);
    if (!f || typeof f !== 'object') return;
    const e = f as Record<string, unknown>;
    const url = text(e.url);
    if (url) add(label, url, 'url', active);
    else add(label, text(e.path) ?? text(e.file), 'path', active);
  };
  for (const [key, active] of [['saved', false], ['recordings', true]] as const) {
    const list = r[key];
    if (!Array.isArray(list)) continue;
    for (const item of list) {
      if (!item || typeof item !== 'object') {
        file('recording', item, active);
        continue;
      }
      const e = item as Record<string, unknown>;
      const label = text(e.label) ?? text(e.key) ?? 'recording';
      file(label, item, active);
      if (Array.isArray(e.files)) for (const f of e.files) file(label, f, active);
    }
  }
  return out;
}

// null: the server has no such command (or did not answer as expected).
export async function fetchRecordings(signal: AbortSignal): Promise<SharedRecording[] | null> {
  try {
    const res = await fetch(RECORDINGS_PATH, {
      headers: pageToken ? { Authorization: `Bearer ${pageToken}` } : {},
      cache: 'no-store',
      signal,
    });
    if (!res.ok) return null;
    return recordingsFrom(await res.json());
  } catch {
    return null;
  }
}
