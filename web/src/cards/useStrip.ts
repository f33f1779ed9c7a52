// Loads one strip's picture (activation or gradient of the selected sample)
// while its card is on screen, and reports when it shows the latest snapshot.
// A strip on screen is watched: the server pushes it with every snapshot.
import { useEffect, useState } from 'preact/hooks';
import { SnapshotReplaced } from '../api/client';
import type { StripInfo, StripKind, Values } from '../api/types';
import { forgetStrip, reportStrip } from '../state/rendered';
import { loadStrip, renderKey } from './renderCache';
import { decodePng, takeDecoded, watchStrip } from './stripPush';

export interface StripRequest {
  layer: string;
  kind: StripKind;
  generation: number;
  sequence: number;
  sample: number;
  average: boolean;
  values: Values;
  // Something to draw exists and may be asked for now.
  ready: boolean;
  // Nothing will be drawn at `sequence` (no tensor, or no picture of it).
  settledEmpty: boolean;
  visible: boolean;
}

export interface Picture {
  key: string;
  // Decoded off the main thread; drawn into the strip's canvas.
  bitmap: ImageBitmap;
  info: StripInfo;
}

export interface StripState {
  picture: Picture | null;
  // The picture is of another sample or other options (the new one is on
  // its way); an older snapshot's picture is not stale (no flicker on steps).
  stale: boolean;
  error: string | null;
}

export function useStrip(r: StripRequest): StripState {
  const [id] = useState(() => Symbol(`${r.layer}:${r.kind}`));
  const [picture, setPicture] = useState<Picture | null>(null);
  const [error, setError] = useState<{ key: string; message: string } | null>(null);
  const params = { layer: r.layer, kind: r.kind, sample: r.sample, average: r.average, values: r.values };
  const key = renderKey(r.generation, r.sequence, params);
  const { visible, generation, sequence, ready, settledEmpty } = r;

  useEffect(() => () => forgetStrip(id), [id]);

  useEffect(() => {
    watchStrip(id, visible ? params : null);
    return () => watchStrip(id, null);
  }, [id, visible, r.layer, r.kind, r.sample, r.average, r.values]);

  useEffect(() => {
    const settled = (s: number) => reportStrip(id, { visible, generation, sequence: s });
    if (!visible) return void reportStrip(id, { visible: false, generation, sequence: 0 });
    if (settledEmpty || picture?.key === key || error?.key === key) return settled(sequence);
    reportStrip(id, { visible, generation, sequence: 0 });
    if (!ready) return;
    let cancelled = false;
    loadStrip(key, params, sequence).then(
      async ({ png, info }) => {
        // Decoded before the swap, so the old picture stays up meanwhile
        // (no blank frame between snapshots).
        let bitmap: ImageBitmap;
        try {
          bitmap = await (takeDecoded(key) ?? decodePng(png));
        } catch {
          if (cancelled) return;
          setError({ key, message: 'the server sent a picture this browser cannot decode' });
          return settled(sequence);
        }
        if (cancelled) return bitmap.close();
        setPicture({ key, bitmap, info });
        setError(null);
        settled(Math.max(sequence, info.sequence));
      },
      (e: unknown) => {
        // A newer snapshot is on its way; this card will ask for its picture.
        if (cancelled || e instanceof SnapshotReplaced) return;
        setError({ key, message: e instanceof Error ? e.message : String(e) });
        settled(sequence);
      },
    );
    return () => {
      cancelled = true;
    };
    // `params` is covered by `key`.
  }, [key, visible, ready, settledEmpty]);

  // A replaced picture's pixels are in no canvas any more: free them.
  useEffect(() => {
    const bitmap = picture?.bitmap;
    return () => bitmap?.close();
  }, [picture?.bitmap]);

  const stale =
    picture != null &&
    (picture.info.sample !== r.sample || picture.info.average !== r.average || picture.info.values !== r.values);
  return { picture, stale, error: error?.key === key ? error.message : null };
}
