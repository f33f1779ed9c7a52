// The Experiment page's form (the left column): the kind, Run and Cancel,
// the layer and the kind's parameters, the overlay and auto-run switches,
// a deep dream's link to the same layer's Min/Max inputs, and what went wrong.
import { useState } from 'preact/hooks';
import { cancelExperiment, setAutoRunExperiments } from '../api/client';
import type { Architecture, ExperimentKind, ExperimentList, ExperimentParamSpec, ExperimentResult } from '../api/types';
import { pageHref } from '../links';
import { visible, type Values } from './params';
import type { ExperimentAddress } from './useExperimentForm';

export interface FormProps {
  architecture: Architecture | null;
  list: ExperimentList | null;
  setList: (list: ExperimentList) => void;
  address: ExperimentAddress;
  kind: ExperimentKind | undefined;
  kindValues: Values;
  setValue: (key: string, v: string | boolean) => void;
  overlay: boolean;
  setOverlay: (on: boolean) => void;
  result: ExperimentResult | null;
  paused: boolean;
  autoRun: boolean;
  run: () => Promise<void>;
  error: string | null;
  setError: (message: string | null) => void;
  notice: string | null;
}

export function ExperimentForm(props: FormProps) {
  const { list, address, kind, overlay, setOverlay, error, notice } = props;
  return (
    <aside class="experiment-form" data-testid="experiment-form">
      <h1 class="stats-heading">Experiment</h1>
      <label class="form-row form-row-stacked" data-tour="experiment-kind">
        <span>Experiment</span>
        <select
          data-testid="experiment-kind"
          value={address.kindName}
          title={kind?.summary}
          onChange={(e) => address.setKindName((e.target as HTMLSelectElement).value)}
        >
          {list?.kinds.map((k) => (
            <option key={k.kind} value={k.kind} title={k.summary}>
              {k.title}
            </option>
          ))}
        </select>
      </label>
      <RunButtons {...props} />
      <ParamsFieldset {...props} />
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
      <AutoRunSwitch {...props} />
      {kind?.kind === 'deep_dream' && address.layer && (
        <a
          class="btn btn-quiet side-link"
          data-testid="compare-minmax"
          href={pageHref('stats', { layer: address.layer, view: 'minmax' })}
          title="The inputs that drove this layer's channels highest and lowest (the Stats page's Min/Max view), beside what the dream made of them"
        >
          Compare with MIN/MAX
        </a>
      )}
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
  );
}

function RunButtons({ kind, result, paused, autoRun, address, run }: FormProps) {
  const running = result !== null && !result.done;
  return (
    <div class="experiment-buttons" data-tour="experiment-buttons">
      <button
        class="btn btn-run"
        data-testid="experiment-run"
        disabled={!kind || running || autoRun || !address.layer}
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
  );
}

// The layer (those the kind cannot use disabled, with the reason) and the kind's parameters.
function ParamsFieldset({ architecture, address, kind, kindValues, setValue }: FormProps) {
  const { layer, setLayer } = address;
  const channels = (() => {
    const l = architecture?.layers.find((x) => x.name === layer);
    return l && l.output_shape.length >= 2 ? l.output_shape[1] : undefined;
  })();
  return (
    <fieldset class="side-group">
      <legend>Parameters</legend>
      <label class="form-row" data-tour="experiment-layer">
        <span>Layer</span>
        <select data-testid="experiment-layer" value={layer} onChange={(e) => setLayer((e.target as HTMLSelectElement).value)}>
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
  );
}

// The session's auto-run setting.
function AutoRunSwitch({ list, setList, autoRun, setError }: FormProps) {
  // The switch as the user set it, until the server's answer: a re-render
  // in between (a push) must not flip it back.
  const [autoRunWanted, setAutoRunWanted] = useState<boolean | null>(null);
  return (
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
