// The run the Experiment page shows and its picture: results come over the
// push channel (the page's own run, and with auto-run this tab's newest auto
// run), the shown run is fetched again after a reconnect, and the picture is
// redrawn when the run's step moves on, it ends or the overlay switch flips,
// one render at a time (the newest state wins).
import { useEffect, useRef, useState } from 'preact/hooks';
import { getExperimentResult, pngUrl, renderExperiment } from '../api/client';
import type { ExperimentResult } from '../api/types';
import { store } from '../state/app';
import { isNewer, latestPushed, onExperimentResult, tabId } from '../state/experiments';
import { useSelector } from '../state/store';

// Whether the result has something to draw yet (asking earlier is a 409).
function hasPicture(r: ExperimentResult): boolean {
  return (r.produced_images ?? 0) > 0 || r.attribution_shape !== undefined;
}

export interface ShownRun {
  result: ExperimentResult | null;
  picture: string | null;
  // The seq of the run shown (0: none yet).
  followed: { current: number };
  // Shows `r` (keeping the previous picture until its own is drawn).
  show: (r: ExperimentResult) => void;
  // Shows a run the page just started: the picture clears, and a push that
  // overtook the reply wins.
  start: (r: ExperimentResult) => void;
}

// `autoRun`: whether this tab's auto runs are followed too.
export function useShownRun(overlay: boolean, autoRun: boolean): ShownRun {
  const generation = useSelector(store, (s) => s.generation);
  const [result, setResult] = useState<ExperimentResult | null>(null);
  const [picture, setPicture] = useState<string | null>(null);
  const followed = useRef(0);
  const overlayRef = useRef(overlay);
  overlayRef.current = overlay;
  const autoRef = useRef(autoRun);
  autoRef.current = autoRun;

  const drawing = useRef({ busy: false, again: false, seq: 0, step: -1, done: false });
  const draw = (r: ExperimentResult, force = false) => {
    const d = drawing.current;
    if (!hasPicture(r)) return;
    if (!force && d.seq === r.seq && d.step === r.step && d.done === r.done) return;
    if (d.busy) {
      d.again = true;
      return;
    }
    d.busy = true;
    d.seq = r.seq;
    d.step = r.step;
    d.done = r.done;
    renderExperiment(r.seq, overlayRef.current)
      .then((img) => {
        if (followed.current === r.seq) setPicture(pngUrl(img.png));
      })
      .catch(() => undefined) // nothing drawn yet, or the run left the 8 kept
      .finally(() => {
        d.busy = false;
        if (d.again) {
          d.again = false;
          const newest = latestPushed(followed.current);
          if (newest) draw(newest, true);
        }
      });
  };

  const show = (r: ExperimentResult) => {
    followed.current = r.seq;
    setResult(r);
    draw(r);
  };

  const start = (r: ExperimentResult) => {
    setPicture(null);
    const pushed = latestPushed(r.seq);
    show(pushed && isNewer(pushed, r) ? pushed : r);
  };

  useEffect(
    () =>
      onExperimentResult((r) => {
        if (r.seq === followed.current || (autoRef.current && r.tab === tabId && r.seq > followed.current)) show(r);
      }),
    [],
  );

  // Events sent while the link was down are gone: fetch the shown run once
  // on each reconnect.
  useEffect(() => {
    const seq = followed.current;
    if (seq === 0 || generation === 0) return;
    getExperimentResult(seq)
      .then((r) => {
        if (r.seq === followed.current) show(r);
      })
      .catch(() => undefined);
  }, [generation]);

  // The overlay switch is a pure re-render of the same result.
  useEffect(() => {
    if (result) draw(result, true);
  }, [overlay]);

  return { result, picture, followed, show, start };
}
