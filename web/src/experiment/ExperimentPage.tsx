// The Experiment page (/experiment?layer=): ask the paused model a question
// about one layer — Deep Dream, Grad-CAM, Neuron Gradient, Neuron Integrated
// Gradients, Occlusion. A form on the left (kind, layer first, the kind's
// parameters, overlay), the status and the result picture on the right. The
// server validates everything again; the page only keeps obvious mistakes
// (an empty number) from being sent.
import { useEffect, useState } from 'preact/hooks';
import { Dialogs } from '../App';
import { cancelExperiment, listExperiments, runExperiment, setAutoRunExperiments } from '../api/client';
import type { ExperimentKind, ExperimentKindName, ExperimentList, ExperimentParamSpec, ExperimentResult } from '../api/types';
import { pageHref } from '../links';
import { store } from '../state/app';
import { useSelector } from '../state/store';
import { Banners } from '../topbar/Banners';
import { TopBar } from '../topbar/TopBar';
import { useAutoExperiment } from './useAutoExperiment';
import { useShownRun } from './useShownRun';

type Values = Record<string, string | boolean>;

function defaultsOf(kind: ExperimentKind): Values {
  const v: Values = {};
  for (const p of kind.params) v[p.key] = p.type === 'boolean' ? Boolean(p.default) : String(p.default);
  return v;
}

// The params to send, or the labels of numbers left empty or unreadable.
function paramsOf(kind: ExperimentKind, values: Values): { params: Record<string, unknown>; missing: string[] } {
  const params: Record<string, unknown> = {};
  const missing: string[] = [];
  for (const p of kind.params) {
    if (!visible(p, values)) continue;
    const v = values[p.key];
    if (p.type === 'boolean') params[p.key] = Boolean(v);
    else if (p.type === 'choice') params[p.key] = String(v);
    else {
      const n = Number(v);
      if (v === '' || v === undefined || !Number.isFinite(n)) missing.push(p.label);
      else params[p.key] = n;
    }
  }
  return { params, missing };
}

// Deep Dream's sample only matters when starting from the current batch.
function visible(p: ExperimentParamSpec, values: Values): boolean {
  return p.key !== 'sample' || values.start === 'sample';
}

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
        : paused ? 'Starting…' : 'Runs at the next live update; Stop or Step Batch runs it now.';
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
  const [list, setList] = useState<ExperimentList | null>(null);
  const [kindName, setKindName] = useState(() => new URLSearchParams(location.search).get('kind') ?? 'gradcam');
  const [layer, setLayer] = useState(() => new URLSearchParams(location.search).get('layer') ?? '');
  const [values, setValues] = useState<Record<string, Values>>({});
  const [overlay, setOverlay] = useState(false);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  // The auto-run switch as the user set it, until the server's answer: a
  // re-render in between (a push) must not flip it back.
  const [autoRunWanted, setAutoRunWanted] = useState<boolean | null>(null);

  // The address keeps the layer and kind, so a reload or a shared link opens the same.
  useEffect(() => {
    const params: Record<string, string> = {};
    if (layer) params.layer = layer;
    if (kindName !== 'gradcam') params.kind = kindName;
    history.replaceState(null, '', pageHref('experiment', params));
  }, [layer, kindName]);

  // The kinds and their layers follow the architecture (known after the first capture).
  useEffect(() => {
    const ac = new AbortController();
    listExperiments(ac.signal)
      .then(setList)
      .catch((e: Error) => e.name !== 'AbortError' && setError(e.message));
    return () => ac.abort();
  }, [architecture, sequence]);

  const kind = list?.kinds.find((k) => k.kind === kindName);
  // A kind from the address that this server does not offer: its first one.
  useEffect(() => {
    if (list && !list.kinds.some((k) => k.kind === kindName) && list.kinds[0]) setKindName(list.kinds[0].kind);
  }, [list, kindName]);
  const kindValues = kind ? { ...defaultsOf(kind), ...values[kind.kind] } : {};
  const usable = kind?.layers ?? [];
  const paused = state === 'paused';
  const autoRun = list?.auto_run ?? false;
  const shown = useShownRun(overlay, autoRun);
  const { result, picture } = shown;
  const running = result !== null && !result.done;

  // A layer the kind cannot use switches to the first it can, with a notice.
  useEffect(() => {
    if (!kind || usable.length === 0 || usable.includes(layer)) return;
    if (layer) setNotice(`${kind.title} cannot use ${layer}; switched to ${usable[0]}.`);
    setLayer(usable[0]);
  }, [kind, layer, usable.join(',')]);

  const checkedParams = () => {
    if (!kind) return null;
    const { params, missing } = paramsOf(kind, kindValues);
    if (missing.length > 0) {
      setError(`Enter a number for: ${missing.join(', ')}`);
      return null;
    }
    return params;
  };

  const run = async () => {
    const params = checkedParams();
    if (!kind || !params) return;
    setError(null);
    setNotice(null);
    try {
      const r = await runExperiment(kind.kind as ExperimentKindName, layer, params);
      if (r.ignored_params && r.ignored_params.length > 0) setNotice(`Ignored: ${r.ignored_params.join(', ')}`);
      shown.start(r);
    } catch (e) {
      setError((e as Error).message);
    }
  };

  const autoKey = autoRun && kind && layer ? JSON.stringify([kind.kind, layer, paramsOf(kind, kindValues)]) : '';
  useAutoExperiment(
    autoRun,
    autoKey,
    () => {
      const params = checkedParams();
      return kind && params ? { kind: kind.kind as ExperimentKindName, layer, params } : null;
    },
    shown,
    setError,
  );

  const setValue = (key: string, v: string | boolean) =>
    setValues((all) => ({ ...all, [kindName]: { ...kindValues, [key]: v } }));
  const channels = (() => {
    const l = architecture?.layers.find((x) => x.name === layer);
    return l && l.output_shape.length >= 2 ? l.output_shape[1] : undefined;
  })();

  return (
    <div class="app experiment-app">
      <TopBar page="experiment" />
      <Banners />
      <div class="experiment-body">
        <aside class="experiment-form" data-testid="experiment-form">
          <h1 class="stats-heading">Experiment</h1>
          <label class="form-row form-row-stacked" data-tour="experiment-kind">
            <span>Experiment</span>
            <select
              data-testid="experiment-kind"
              value={kindName}
              title={kind?.summary}
              onChange={(e) => setKindName((e.target as HTMLSelectElement).value)}
            >
              {list?.kinds.map((k) => (
                <option key={k.kind} value={k.kind} title={k.summary}>
                  {k.title}
                </option>
              ))}
            </select>
          </label>
          <div class="experiment-buttons" data-tour="experiment-buttons">
            <button
              class="btn btn-run"
              data-testid="experiment-run"
              disabled={!kind || running || autoRun || !layer}
              title={paused || autoRun ? 'Run the experiment' : 'Run the experiment (training must be paused)'}
              onClick={() => void run()}
            >
              Run
            </button>
            <button
              class="btn btn-quiet"
              data-testid="experiment-cancel"
              disabled={!running}
              onClick={() => result && void cancelExperiment(result.seq)}
            >
              Cancel
            </button>
          </div>
          <fieldset class="side-group">
            <legend>Parameters</legend>
            <label class="form-row" data-tour="experiment-layer">
              <span>Layer</span>
              <select
                data-testid="experiment-layer"
                value={layer}
                onChange={(e) => setLayer((e.target as HTMLSelectElement).value)}
              >
                {architecture?.layers
                  .filter((l) => l.role !== 'input')
                  .map((l) => {
                    const why = kind?.unusable_layers.find((u) => u.layer === l.name)?.reason;
                    return (
                      <option key={l.name} value={l.name} disabled={why !== undefined} title={why}>
                        {l.name}
                      </option>
                    );
                  })}
              </select>
            </label>
            {kind?.params
              .filter((p) => visible(p, kindValues))
              .map((p) => (
                <Param
                  key={`${kind.kind}-${p.key}`}
                  spec={p}
                  value={kindValues[p.key]}
                  max={p.key === 'channel' || p.key === 'channels' ? channels : undefined}
                  onChange={(v) => setValue(p.key, v)}
                />
              ))}
          </fieldset>
          {kind?.attribution && (
            <label class="form-row form-row-check">
              <input
                type="checkbox"
                data-testid="experiment-overlay"
                checked={overlay}
                onChange={(e) => setOverlay((e.target as HTMLInputElement).checked)}
              />
              <span>Overlay on input</span>
            </label>
          )}
          <label
            class="form-row form-row-check"
            data-tour="experiment-auto-run"
            title="Run this page's experiment again at every pause and live update (auto-run is a setting of the session; each open page re-runs its own experiment)"
          >
            <input
              type="checkbox"
              data-testid="experiment-auto-run"
              checked={autoRunWanted ?? autoRun}
              onChange={(e) => {
                const on = (e.target as HTMLInputElement).checked;
                setAutoRunWanted(on);
                setAutoRunExperiments(on)
                  .then(() => list && setList({ ...list, auto_run: on }))
                  .catch((err: Error) => setError(err.message))
                  .finally(() => setAutoRunWanted(null));
              }}
            />
            <span>Auto-run on every live update</span>
          </label>
          {error && (
            <p class="form-error" data-testid="experiment-error">
              {error}
            </p>
          )}
          {notice && (
            <p class="form-hint" data-testid="experiment-notice">
              {notice}
            </p>
          )}
          <p class="form-hint experiment-description" data-testid="experiment-description">
            {kind?.description}
          </p>
        </aside>
        <main class="experiment-main" data-tour="experiment-result">
          <p
            class="experiment-status"
            data-testid="experiment-status"
            data-stage={result?.stage ?? 'idle'}
            data-seq={result?.seq ?? 0}
          >
            {statusText(result, kind, paused, autoRun)}
          </p>
          {result?.notes.map((n) => (
            <p class="form-hint" key={n}>
              {n}
            </p>
          ))}
          {picture && <img class="experiment-picture" data-testid="experiment-picture" src={picture} alt="result" />}
        </main>
      </div>
      <Dialogs />
    </div>
  );
}

function Param({
  spec,
  value,
  max,
  onChange,
}: {
  spec: ExperimentParamSpec;
  value: string | boolean | undefined;
  max?: number;
  onChange: (v: string | boolean) => void;
}) {
  if (spec.type === 'boolean') {
    return (
      <label class="form-row form-row-check" title={spec.description}>
        <input
          type="checkbox"
          data-testid={`param-${spec.key}`}
          checked={Boolean(value)}
          onChange={(e) => onChange((e.target as HTMLInputElement).checked)}
        />
        <span>{spec.label}</span>
      </label>
    );
  }
  if (spec.type === 'choice') {
    return (
      <label class="form-row" title={spec.description}>
        <span>{spec.label}</span>
        <select
          data-testid={`param-${spec.key}`}
          value={String(value)}
          onChange={(e) => onChange((e.target as HTMLSelectElement).value)}
        >
          {spec.options?.map((o) => (
            <option key={o} value={o}>
              {o === 'sample' ? 'Current batch' : o === 'noise' ? 'Noise' : o}
            </option>
          ))}
        </select>
      </label>
    );
  }
  const upper = max !== undefined ? (spec.key === 'channel' ? max - 1 : max) : spec.maximum;
  return (
    <label class="form-row" title={spec.description}>
      <span>{spec.label}</span>
      <input
        type="number"
        data-testid={`param-${spec.key}`}
        value={String(value ?? '')}
        min={spec.minimum}
        max={upper}
        step={spec.type === 'integer' ? 1 : 'any'}
        class={value === '' ? 'input-invalid' : undefined}
        onInput={(e) => onChange((e.target as HTMLInputElement).value)}
      />
    </label>
  );
}
