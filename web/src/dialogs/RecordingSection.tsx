// The gear dialog's Recording section: the view this page shows, Snapshot
// (a PNG of it now) and Record (an MP4 of it from now on), and the active
// recordings with their frame counts and errors, each with Save & Finish and
// Delete. The server draws the frames; the page only names the view.
import { useEffect, useState } from 'preact/hooks';
import * as api from '../api/client';
import type { Recording, RecordViewArgs, Recordings } from '../api/types';
import { currentPage } from '../links';
import { store, toast } from '../state/app';
import { experimentForm } from '../state/experiments';
import { shownLayers, shownPhase, statsStore } from '../state/stats';
import { useFields, useSelector } from '../state/store';

export interface PageView {
  args: RecordViewArgs;
  key: string; // the server's recording key for it
  label: string;
}

const NOTHING = 'Nothing recordable on this page yet — show a layer or open its weights or statistics first.';

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

// The recordable view of the page the dialog opened on; null with the reason.
export function usePageView(): { view: PageView | null; reason: string } {
  const page = currentPage();
  const main = useFields(store, 'shown', 'sample', 'average', 'values');
  const firstLayer = useSelector(store, (x) => x.architecture?.layers.find((l) => l.role !== 'input')?.name ?? null);
  const livePhase = useSelector(store, (x) => x.status?.live_position?.phase ?? null);
  const stats = useFields(statsStore, 'view', 'phase', 'layer', 'list');
  const experiment = useSelector(experimentForm, (x) => x.form);
  if (page === 'main') {
    if (main.shown.length === 0) return { view: null, reason: NOTHING };
    const layers = main.shown.slice(0, 64);
    return {
      view: {
        args: { view: 'layers', layers, sample: main.sample, average: main.average, values: main.values },
        key: 'main',
        label: `Layers: ${layers.join(', ')}`,
      },
      reason: '',
    };
  }
  if (page === 'weights') {
    const layer = new URLSearchParams(location.search).get('layer') ?? '';
    if (!layer) return { view: null, reason: NOTHING };
    return { view: { args: { view: 'weights', layer }, key: `weights:${layer}`, label: `Weights: ${layer}` }, reason: '' };
  }
  if (page === 'stats') {
    const layers = shownLayers(stats, firstLayer);
    const phase = shownPhase(stats, layers, livePhase);
    if (layers.length === 0 || stats.view === 'graphs') {
      return { view: null, reason: 'The graphs view is not recordable: switch to Histograms or Min/Max.' };
    }
    // A recording follows a phase's statistics as they grow; the current
    // batch is one batch at a time.
    if (phase === null) {
      return { view: null, reason: 'Current batch is not recordable: pick a phase (its statistics grow as it trains).' };
    }
    const phaseArg = { phase };
    if (stats.view === 'minmax') {
      const layer = layers[0];
      return {
        view: { args: { view: 'patches', layer, ...phaseArg }, key: 'watch_minmax', label: `Min/Max patches: ${layer}` },
        reason: '',
      };
    }
    const shown = layers.slice(0, 8);
    return {
      view: {
        args: { view: 'histograms', layers: shown, ...phaseArg },
        key: 'watch_histogram',
        label: `Histograms: ${shown.join(', ')}`,
      },
      reason: '',
    };
  }
  if (page === 'experiment') {
    if (!experiment) return { view: null, reason: 'Choose an experiment, a layer and its parameters first.' };
    const { kind, layer, params } = experiment;
    // The recording runs its own copy of this experiment at every live update.
    return {
      view: {
        args: { view: 'experiment', kind, layer, params },
        key: `experiment:${layer}`,
        label: `Experiment: ${kind} of ${layer}`,
      },
      reason: '',
    };
  }
  return { view: null, reason: 'Nothing on this page is recordable.' };
}

type Act = (what: () => Promise<unknown>, done: (r: unknown) => string) => Promise<void>;

// The recordings as the server lists them, the last error, and `act`: one
// command at a time (busy meanwhile), its outcome toasted and the list re-read.
function useRecordings(active: string[]) {
  const [list, setList] = useState<Recordings | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [tick, setTick] = useState(0);

  // The list follows the status's recordings; while something records its
  // frame counts grow, so the open dialog re-reads it each second.
  useEffect(() => {
    const abort = new AbortController();
    api.listRecordings(abort.signal).then(setList, (e: Error) => {
      if (e.name !== 'AbortError') setError(e.message);
    });
    return () => abort.abort();
  }, [active.join('\n'), tick]);
  useEffect(() => {
    if (active.length === 0) return;
    const timer = setInterval(() => setTick((t) => t + 1), 1000);
    return () => clearInterval(timer);
  }, [active.length]);

  const act = async (what: () => Promise<unknown>, done: (r: unknown) => string) => {
    setBusy(true);
    setError(null);
    try {
      const r = await what();
      toast(done(r), 'info');
      setTick((t) => t + 1);
    } catch (e) {
      setError(message(e));
    } finally {
      setBusy(false);
    }
  };
  return { list, error, busy, act };
}

export function RecordingSection() {
  const { view, reason } = usePageView();
  const active = useSelector(store, (s) => s.status?.recordings ?? []);
  const { list, error, busy, act } = useRecordings(active);
  const recording = view != null && active.includes(view.key);

  return (
    <section class="recording-section" data-testid="recording-section">
      <h3 class="settings-heading">Recording</h3>
      <CurrentView view={view} reason={reason} recording={recording} busy={busy} act={act} />
      {list && list.recordings.length > 0 && (
        <ul class="recording-list" data-testid="recording-list">
          {list.recordings.map((r) => (
            <RecordingItem key={r.key} r={r} view={view} busy={busy} act={act} />
          ))}
        </ul>
      )}
      <div class="form-error" role="alert" data-testid="recording-error-message">
        {error}
      </div>
      {list && (
        <p class="form-hint">
          Files: <span class="mono" data-testid="recording-directory">{list.directory}/</span> (MP4 at {list.frame_rate} fps,
          PNG snapshots)
        </p>
      )}
    </section>
  );
}

// This page's view: Snapshot, and Record unless it records already.
function CurrentView({
  view,
  reason,
  recording,
  busy,
  act,
}: {
  view: PageView | null;
  reason: string;
  recording: boolean;
  busy: boolean;
  act: Act;
}) {
  return view ? (
    <div class="recording-current">
      <span class="form-note" data-testid="recording-view">
        {view.label}
      </span>
      <button
        type="button"
        class="btn btn-quiet"
        data-testid="recording-snapshot"
        disabled={busy}
        title="Save a PNG of this view now"
        onClick={() =>
          act(
            () => api.saveSnapshot(view.args),
            (r) => `Saved ${(r as { files: string[] }).files.join(', ')}`,
          )
        }
      >
        Snapshot
      </button>
      {!recording && (
        <button
          type="button"
          class="btn btn-record"
          data-testid="recording-start"
          disabled={busy}
          title="Record this view as an MP4, a frame at every live update"
          onClick={() => act(() => api.startRecording(view.args), () => `Recording ${view.label}`)}
        >
          Record
        </button>
      )}
    </div>
  ) : (
    <p class="form-note" data-testid="recording-nothing">
      {reason}
    </p>
  );
}

// One active recording: its frames, drops and error, Save & Finish and Delete.
function RecordingItem({ r, view, busy, act }: { r: Recording; view: PageView | null; busy: boolean; act: Act }) {
  return (
    <li data-testid="recording-item" data-key={r.key}>
      <span>
        {r.label}
        {view?.key === r.key ? ' (this view)' : ''}
      </span>
      <span class="form-hint" data-testid="recording-frames">
        {r.frames} frame{r.frames === 1 ? '' : 's'}
        {r.dropped > 0 ? `, ${r.dropped} dropped` : ''}
      </span>
      {r.error && (
        <span class="form-error" data-testid="recording-error">
          {r.error}
        </span>
      )}
      <button
        type="button"
        class="btn btn-step"
        data-testid="recording-stop"
        disabled={busy}
        onClick={() =>
          act(
            () => api.stopRecording(r.key),
            (s) =>
              `Saved ${(s as { stopped: { files: { path: string }[] }[] }).stopped
                .flatMap((x) => x.files.map((f) => f.path))
                .join(', ')}`,
          )
        }
      >
        Save &amp; Finish
      </button>
      <button
        type="button"
        class="btn btn-quiet"
        data-testid="recording-discard"
        disabled={busy}
        onClick={() => act(() => api.discardRecording(r.key), () => `Deleted the recording of ${r.label}`)}
      >
        Delete
      </button>
    </li>
  );
}
