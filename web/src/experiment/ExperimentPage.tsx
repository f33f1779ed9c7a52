// The Experiment page (/experiment?layer=): ask the paused model a question
// about one layer — Deep Dream, Grad-CAM, Neuron Gradient, Neuron Integrated
// Gradients, Occlusion. A form on the left (kind, layer first, the kind's
// parameters, overlay), the status and the result picture on the right. The
// server validates everything again; the page only keeps obvious mistakes
// (an empty number) from being sent.
import { useState } from 'preact/hooks';
import { Dialogs } from '../App';
import type { ExperimentKind, ExperimentResult } from '../api/types';
import { store } from '../state/app';
import { useSelector } from '../state/store';
import { Banners } from '../topbar/Banners';
import { TopBar } from '../topbar/TopBar';
import { ExperimentForm } from './ExperimentForm';
import { defaultsOf, type Values } from './params';
import { useExperimentAddress, useExperimentList, useExperimentRun, useOfferedKind, useUsableLayer } from './useExperimentForm';
import { useShownRun } from './useShownRun';

function statusText(r: ExperimentResult | null, kind: ExperimentKind | undefined, paused: boolean, autoRun: boolean) {
  if (!r) {
    if (autoRun) return 'Runs automatically at every live update.';
    return paused ? 'Press Run.' : 'Press Run (training must be paused).';
  }
  const title = kind?.title ?? r.kind;
  const progress = r.total > 0 ? ` · step ${r.step}/${r.total}` : '';
  const objective = r.objective !== null ? ` · objective ${r.objective}` : '';
  switch (r.stage) {
    case 'queued':
      return r.queued_ahead ? `Queued behind ${r.queued_ahead} experiment${r.queued_ahead === 1 ? '' : 's'}.`
        : paused ? 'Starting…' : 'Runs at the next live update; Pause or Step runs it now.';
    case 'running':
      return `${title} — running${progress}${objective}`;
    case 'done':
      return `${title} — done${progress}${objective}`;
    case 'stopped':
      return r.step === 0 && r.stop_reason?.includes('before it ran')
        ? `Stopped before it ran (${r.stop_reason}).`
        : `${title} — stopped early (${r.stop_reason})${progress}${objective}`;
    case 'failed':
      return `${title} — failed: ${r.error}`;
    default:
      return `${title} — ${r.stage}`;
  }
}

export function ExperimentPage() {
  const architecture = useSelector(store, (s) => s.architecture);
  const state = useSelector(store, (s) => s.status?.state ?? null);
  const sequence = useSelector(store, (s) => s.status?.snapshot_sequence ?? 0);
  const [values, setValues] = useState<Record<string, Values>>({});
  const [overlay, setOverlay] = useState(false);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);

  const address = useExperimentAddress();
  const { list, setList } = useExperimentList(architecture, sequence, setError);
  const kind = useOfferedKind(list, address);
  const kindValues = kind ? { ...defaultsOf(kind), ...values[kind.kind] } : {};
  const paused = state === 'paused';
  const autoRun = list?.auto_run ?? false;
  const shown = useShownRun(overlay, autoRun);
  const { result, picture } = shown;
  useUsableLayer(kind, address, setNotice);
  const run = useExperimentRun({ kind, kindValues, layer: address.layer, autoRun, shown, setError, setNotice });

  const setValue = (key: string, v: string | boolean) =>
    setValues((all) => ({ ...all, [address.kindName]: { ...kindValues, [key]: v } }));

  return (
    <div class="app experiment-app">
      <TopBar page="experiment" />
      <Banners />
      <div class="experiment-body">
        <ExperimentForm
          architecture={architecture}
          list={list}
          setList={setList}
          address={address}
          kind={kind}
          kindValues={kindValues}
          setValue={setValue}
          overlay={overlay}
          setOverlay={setOverlay}
          result={result}
          paused={paused}
          autoRun={autoRun}
          run={run}
          error={error}
          setError={setError}
          notice={notice}
        />
        <ExperimentOutcome result={result} picture={picture} kind={kind} paused={paused} autoRun={autoRun} />
      </div>
      <Dialogs />
    </div>
  );
}

// The right column: the run's status, its notes and its picture.
function ExperimentOutcome({
  result,
  picture,
  kind,
  paused,
  autoRun,
}: {
  result: ExperimentResult | null;
  picture: string | null;
  kind: ExperimentKind | undefined;
  paused: boolean;
  autoRun: boolean;
}) {
  return (
    <main class="experiment-main" data-tour="experiment-result">
      <p class="experiment-status" data-testid="experiment-status" data-stage={result?.stage ?? 'idle'} data-seq={result?.seq ?? 0}>
        {statusText(result, kind, paused, autoRun)}
      </p>
      {result?.notes.map((n) => (
        <p class="form-hint" key={n}>
          {n}
        </p>
      ))}
      {picture && <img class="experiment-picture" data-testid="experiment-picture" src={picture} alt="result" />}
    </main>
  );
}
