// The right pane: the batch's input as the model saw it (denormalised by the
// server), which input of a multi-input model, which sample every strip on
// the page shows, and the probe (pin, forward mode, perturb by clicking).
import { useEffect, useState } from 'preact/hooks';
import { addPerturbation, pngUrl, renderInput, SnapshotReplaced } from '../api/client';
import type { InputInfo, Snapshot } from '../api/types';
import { batchSize, FIXED_BY_RECORDING, mainRecording, sampleExists, setSample, store } from '../state/app';
import { snapshotMicroBatches } from '../state/position';
import { useSelector } from '../state/store';
import { NO_PERTURB, perturbIndex, perturbValues, ProbeControls, valueControl } from './ProbeControls';
import type { PerturbChoice } from './ProbeControls';

interface Picture {
  key: string;
  url: string;
  info: InputInfo;
}

interface InputEntry {
  name: string;
  shape: number[];
}

function inputsOf(snapshot: Snapshot | null, architectureInputs: string[]): InputEntry[] {
  if (snapshot?.inputs?.length) return snapshot.inputs;
  return architectureInputs.map((name) => ({
    name,
    shape: snapshot?.layers.find((l) => l.name === name)?.activation?.shape ?? [],
  }));
}

// Width over height of the picture the server will draw, known before it
// arrives so the pane never jumps: [N,C,H,W] and [N,H,W] are images, the
// rest a one-row strip.
function aspect(shape: number[]): number {
  if (shape.length === 4) return shape[3]! / shape[2]!;
  if (shape.length === 3) return shape[2]! / shape[1]!;
  return 8;
}

// What a bool or integer input's cells mean (the numbers are in the picture).
function ValuesCaption({ info }: { info: InputInfo }) {
  const text =
    info.dtype === 'bool'
      ? `bool: 1 = true (dark), 0 = false (light); ${info.true_count ?? 0} true`
      : `${info.dtype}: ${info.value_min}…${info.value_max}, a colour per value (0 gray)`;
  return (
    <div class="muted mono input-values-caption" data-testid="input-values-caption">
      {text}
    </div>
  );
}

export function InputPane() {
  const generation = useSelector(store, (s) => s.generation);
  const sequence = useSelector(store, (s) => s.sequence);
  const snapshot = useSelector(store, (s) => s.snapshot);
  const architectureInputs = useSelector(store, (s) => s.architecture?.inputs ?? []);
  const sample = useSelector(store, (s) => s.sample);
  const selected = useSelector(store, (s) => s.input);
  const sampleOk = useSelector(store, sampleExists);
  // Under the Hugging Face Trainer's callback: the optimizer step the
  // snapshot is, and which of its micro-batches it shows.
  const shownStep = useSelector(store, (s) => s.status?.snapshot_trainer_step ?? null);
  const microBatches = snapshotMicroBatches(shownStep);
  // A recording of this page draws the sample it started with, and the probe
  // as it was: their controls are held until it is saved or deleted.
  const recording = useSelector(store, mainRecording);

  const inputs = inputsOf(snapshot, architectureInputs);
  const input = Math.min(selected, Math.max(0, inputs.length - 1));
  const n = batchSize(snapshot);
  const key = `${generation}|${sequence}|${input}|${sample}`;
  const ready = snapshot != null && sequence > 0 && sampleOk;
  const { picture, error } = useInputPicture(key, ready, input, sample, sequence);

  const shape = inputs[input]?.shape ?? [];
  const info = picture?.info;
  const ratio = info ? info.width / info.height : aspect(shape);
  const probe = usePerturbation(shape, info ?? null, sample, inputs[input]?.name);

  return (
    <div class="pane input-pane">
      <div class="pane-toolbar">
        <span class="pane-title pane-title-input">Input</span>
        <span class="muted mono">{shape.length ? `[${shape.join(', ')}]` : ''}</span>
      </div>
      <div class="input-body" data-tour="input">
        {recording && (
          <div class="hint-amber" data-testid="input-fixed">
            {FIXED_BY_RECORDING}
          </div>
        )}
        <fieldset class="input-controls" disabled={recording} data-testid="input-controls" title={recording ? FIXED_BY_RECORDING : undefined}>
          {inputs.length > 1 && <InputSelect inputs={inputs} input={input} />}
        </fieldset>
        <div
          class={`input-frame ${info?.layout === 'strip' ? 'is-strip' : info?.layout === 'values' ? 'is-values' : ''}`}
          style={{ aspectRatio: String(ratio) }}
        >
          {picture && (
            <img
              data-testid="input-image"
              data-sample={picture.info.sample}
              class={probe.choice.on ? 'perturbing' : undefined}
              src={picture.url}
              alt={`input ${picture.info.name}, sample ${picture.info.sample}`}
              draggable={false}
              onClick={probe.choice.on && !recording && info?.layout !== 'values' ? probe.perturbAt : undefined}
            />
          )}
          {!picture && !error && <span class="muted">{ready ? 'Loading…' : 'No batch captured yet.'}</span>}
        </div>
        {info && info.value_min != null && <ValuesCaption info={info} />}
        {error?.key === key && <div class="error-text" data-testid="input-error">{error.message}</div>}
        {info?.hint && (
          <div class="hint-amber" data-testid="input-hint">
            {info.hint}
          </div>
        )}
        <fieldset class="input-controls" disabled={recording} title={recording ? FIXED_BY_RECORDING : undefined}>
          <SampleField snapshot={snapshot} n={n} sample={sample} />
          <ProbeControls
            shape={shape}
            info={info ?? null}
            choice={probe.choice}
            setChoice={probe.setChoice}
            error={probe.error}
            setError={probe.setError}
          />
        </fieldset>
        {snapshot?.budget?.trimmed && (
          <div class="hint-amber" data-testid="budget-note" title="StartOptions().snapshot_budget(bytes) raises it">
            {snapshot.budget.note}
          </div>
        )}
        {snapshot && (
          <div class="input-meta mono" data-testid="snapshot-position">
            snapshot #{snapshot.sequence} · {snapshot.position.text}
            {shownStep ? ` · global step ${shownStep.global_step}` : ''}
          </div>
        )}
        {snapshot && microBatches && (
          <div class="input-meta" data-testid="snapshot-micro-batches">
            {microBatches}; the input is the first's
          </div>
        )}
      </div>
    </div>
  );
}

// The picture of input `input`, sample `sample` of snapshot `sequence`, asked
// for again whenever `key` (all of those and the connection's generation)
// changes; kept until the next one is decoded, so it never flickers.
function useInputPicture(key: string, ready: boolean, input: number, sample: number, sequence: number) {
  const [picture, setPicture] = useState<Picture | null>(null);
  const [error, setError] = useState<{ key: string; message: string } | null>(null);
  useEffect(() => {
    if (!ready || picture?.key === key) return;
    let cancelled = false;
    renderInput(input, sample, sequence).then(
      async ({ png, info }) => {
        const url = pngUrl(png);
        const probe = new Image();
        probe.src = url;
        await probe.decode().catch(() => undefined);
        if (cancelled) return;
        setPicture({ key, url, info });
        setError(null);
      },
      (e: unknown) => {
        // A newer snapshot is on its way; its picture will be asked for.
        if (!cancelled && !(e instanceof SnapshotReplaced)) {
          setError({ key, message: e instanceof Error ? e.message : String(e) });
        }
      },
    );
    return () => {
      cancelled = true;
    };
  }, [key, ready]);
  return { picture, error };
}

// The probe's perturbation choice, and a click on the picture setting the
// value under it (the picture fills its frame: the frame takes the picture's
// aspect ratio).
function usePerturbation(shape: number[], info: InputInfo | null, sample: number, inputName: string | undefined) {
  const [choice, setChoice] = useState<PerturbChoice>(NO_PERTURB);
  const [error, setError] = useState<string | null>(null);
  const perturbAt = (e: MouseEvent) => {
    const img = e.currentTarget as HTMLImageElement;
    const box = img.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) return;
    const index = perturbIndex(
      shape,
      (e.clientX - box.left) / box.width,
      (e.clientY - box.top) / box.height,
      info?.layout === 'strip',
    );
    const values = perturbValues(choice, valueControl(shape, info), info);
    setError(null);
    addPerturbation({ index, values, sample, input_name: inputName }).catch((err: unknown) =>
      setError(err instanceof Error ? err.message : String(err)),
    );
  };
  return { choice, setChoice, error, setError, perturbAt };
}

// Which input of a multi-input model the pane shows.
function InputSelect({ inputs, input }: { inputs: InputEntry[]; input: number }) {
  return (
    <label class="field">
      <span>Input</span>
      <select
        data-testid="input-select"
        value={String(input)}
        onChange={(e) => store.set({ input: Number(e.currentTarget.value) })}
      >
        {inputs.map((x, i) => (
          <option key={x.name} value={String(i)}>
            {x.name}
          </option>
        ))}
      </select>
    </label>
  );
}

// The sample every strip on the page shows (clamped to the batch).
function SampleField({ snapshot, n, sample }: { snapshot: Snapshot | null; n: number; sample: number }) {
  return (
    <label class="field">
      <span>
        Select sample in batch ({snapshot?.budget?.trimmed ? `${n} of ${snapshot.batch_size} kept` : n}):
      </span>
      <input
        type="number"
        data-testid="sample-input"
        min={0}
        max={Math.max(0, n - 1)}
        step={1}
        value={sample}
        disabled={n === 0}
        onInput={(e) => {
          const field = e.currentTarget;
          if (Number.isNaN(field.valueAsNumber)) return;
          setSample(field.valueAsNumber);
          const clamped = store.get().sample;
          if (clamped !== field.valueAsNumber) field.value = String(clamped);
        }}
        onBlur={(e) => {
          // Shows the clamped value if the typed one was out of range.
          e.currentTarget.value = String(store.get().sample);
        }}
      />
    </label>
  );
}
