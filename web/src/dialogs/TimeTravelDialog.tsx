// Time travel: rewind the loop to the start of a cached epoch. Rebuilt from
// GET /api/time_travel each time it opens; a slider over the cached epochs
// only (gaps are not selectable), preselecting the latest one not after the
// current epoch. A refusal shows the server's message under "Time travel failed".
import { useEffect, useState } from 'preact/hooks';
import { getTimeTravel } from '../api/client';
import type { TimeTravelReport } from '../api/types';
import { store } from '../state/app';
import { cacheFullRun, timeTravel } from '../state/commands';
import { useSelector } from '../state/store';
import { Modal } from './Modal';

export function TimeTravelDialogHost() {
  const open = useSelector(store, (s) => s.timeTravelOpen);
  if (!open) return null;
  return <TimeTravelDialog />;
}

// [0,1,2,5] → "0–2, 5"
export function compressEpochs(epochs: number[]): string {
  const sorted = [...new Set(epochs)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(j === i ? `${sorted[i]}` : `${sorted[i]}–${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(', ');
}

// Index into `cached` of the latest epoch ≤ current (the last one when unknown).
export function preselect(cached: number[], current: number | null | undefined): number {
  if (cached.length === 0) return 0;
  if (current == null) return cached.length - 1;
  let best = 0;
  cached.forEach((e, i) => {
    if (e <= current) best = i;
  });
  return best;
}

// The cache report, read once when the dialog opens (cached epochs sorted),
// and the slider's position over it.
function useTimeTravelReport() {
  const [report, setReport] = useState<TimeTravelReport | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [index, setIndex] = useState(0);
  useEffect(() => {
    const ac = new AbortController();
    getTimeTravel(ac.signal).then(
      (r) => {
        const cached = [...(r.cached_epochs ?? [])].sort((a, b) => a - b);
        setReport({ ...r, cached_epochs: cached });
        setIndex(preselect(cached, r.current_epoch));
      },
      (e: unknown) => {
        if (!ac.signal.aborted) setLoadError(e instanceof Error ? e.message : String(e));
      },
    );
    return () => ac.abort();
  }, []);
  return { report, loadError, index, setIndex };
}

function TimeTravelDialog() {
  const { report, loadError, index, setIndex } = useTimeTravelReport();
  const [failure, setFailure] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const close = () => store.set({ timeTravelOpen: false });
  const cached = report?.cached_epochs ?? [];
  const uncached = report?.uncached_epochs ?? [];
  const epoch = cached[index];

  const go = async (e: Event) => {
    e.preventDefault();
    if (busy || epoch == null) return;
    setBusy(true);
    const refusal = await timeTravel(epoch);
    setBusy(false);
    if (refusal) setFailure(refusal);
    else close();
  };
  const cacheAll = async () => {
    if (busy) return;
    setBusy(true);
    const refusal = await cacheFullRun();
    setBusy(false);
    if (refusal) setFailure(refusal);
    else close();
  };

  return (
    <Modal title="Time travel" testid="time-travel-dialog" onClose={close}>
      <form class="form" onSubmit={go}>
        {report == null && loadError == null && <p class="form-note">Loading the epoch cache…</p>}
        {loadError != null && (
          <p class="form-note" data-testid="time-travel-load-error">
            Could not read the epoch cache: {loadError}
          </p>
        )}
        {report != null && (
          <EpochPicker
            report={report}
            index={index}
            onPick={(i) => {
              setIndex(i);
              setFailure(null);
            }}
          />
        )}
        {failure != null && (
          <div class="tt-failure" role="alert" data-testid="time-travel-error">
            <strong>Time travel failed</strong>
            <div>{failure}</div>
          </div>
        )}
        <div class="form-actions">
          <button type="button" class="btn btn-quiet" data-testid="time-travel-cancel" onClick={close}>
            Cancel
          </button>
          {uncached.length > 0 && (
            <button
              type="button"
              class="btn btn-quiet"
              data-testid="time-travel-cache-all"
              disabled={busy}
              onClick={cacheAll}
              title="Run training to the end so every epoch gets cached"
            >
              Cache full training run
            </button>
          )}
          <button type="submit" class="btn btn-step" data-testid="time-travel-go" disabled={busy || epoch == null}>
            Time travel
          </button>
        </div>
      </form>
    </Modal>
  );
}

// What the cache holds: the slider over the cached epochs, and the epochs
// not cached (yet) or pending.
function EpochPicker({ report, index, onPick }: { report: TimeTravelReport; index: number; onPick: (index: number) => void }) {
  const cached = report.cached_epochs ?? [];
  const uncached = report.uncached_epochs ?? [];
  const epoch = cached[index];
  return (
    <>
      <p class="form-note">
        Rewinds training to the first batch of a cached epoch and pauses there.
        {report.current_epoch != null && (
          <>
            {' '}
            Now in epoch <span class="mono">{report.current_epoch}</span>
            {report.total_epochs != null ? ` of ${report.total_epochs}` : ''}.
          </>
        )}
      </p>
      {cached.length > 0 ? (
        <label class="tt-slider-row">
          <input
            type="range"
            data-testid="time-travel-slider"
            min={0}
            max={cached.length - 1}
            step={1}
            value={index}
            disabled={cached.length < 2}
            onInput={(e) => onPick(Number(e.currentTarget.value))}
          />
          <span class="mono tt-epoch" data-testid="time-travel-epoch">
            epoch {epoch}
          </span>
        </label>
      ) : (
        <p class="form-note">No epoch is cached yet.</p>
      )}
      <p class="form-hint" data-testid="time-travel-cached">
        Cached epochs: {cached.length > 0 ? compressEpochs(cached) : 'none'}
      </p>
      {uncached.length > 0 && (
        <p class="form-hint" data-testid="time-travel-uncached">
          Uncached epochs: {compressEpochs(uncached)} — become available once training has passed their start
        </p>
      )}
      {report.pending_epoch != null && (
        <p class="form-hint">A jump to epoch {report.pending_epoch} is pending.</p>
      )}
    </>
  );
}
