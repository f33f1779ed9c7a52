// The run's recordings as the Share dialog's Video target offers them: each
// saved MP4 (list_recordings' saved), which the server plays and hands out
// as a download (get_recording_file), and the recordings still being
// written, which can be shared once saved.
import { listRecordings, recordingFileUrl } from '../api/client';
import type { Recordings } from '../api/types';

export interface SharedVideo {
  // Unique among the dialog's videos: the file's path.
  path: string;
  label: string;
  // Saved: the address that plays it, and the one that downloads it.
  // Still recording: null (the file is not playable until Save & Finish).
  url: string | null;
  download: string | null;
}

// Newest saved first (the one just made), then those still recording.
export function videosFrom(r: Recordings): SharedVideo[] {
  const out: SharedVideo[] = [];
  const seen = new Set<string>();
  for (const saved of [...r.saved].reverse()) {
    for (const path of saved.files) {
      if (seen.has(path)) continue;
      seen.add(path);
      out.push({ path, label: saved.label, url: recordingFileUrl(path), download: recordingFileUrl(path, true) });
    }
  }
  for (const active of r.recordings) {
    for (const file of active.files) {
      if (seen.has(file.path)) continue;
      seen.add(file.path);
      out.push({ path: file.path, label: active.label, url: null, download: null });
    }
  }
  return out;
}

// The videos, or why the list could not be had (the dialog shows it).
export async function fetchVideos(signal: AbortSignal): Promise<{ videos: SharedVideo[] } | { error: string }> {
  try {
    return { videos: videosFrom(await listRecordings(signal)) };
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
}
