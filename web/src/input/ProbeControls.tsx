// The input pane's probe section: pin the batch, choose the forward mode,
// perturb input values by clicking the input picture. The probe is the
// server's state, carried by the status; the cards show its result in the
// captured batch's place while it is active. On a locked session (a shared
// demo) it is this visitor's own: the server keys it to the browser's
// cookie, so the page needs nothing more, and no other visitor sees it.
import { useEffect, useState } from 'preact/hooks';
import type { InputInfo, Num, ProbeMode, ProbeStatus, Status } from '../api/types';
import { clearPerturbations, pinBatch, setProbeMode, unpinBatch } from '../api/client';
import { store } from '../state/app';
import { useSelector } from '../state/store';

// What a click on the input sets: a colour (gray/RGB images), or numbers in
// the input's own units (one per channel, or one for every channel).
export interface PerturbChoice {
  on: boolean;
  colour: string;
  values: number[];
}

export const NO_PERTURB: PerturbChoice = { on: false, colour: '#ffffff', values: [0] };

// How values are entered for an input of `shape` drawn as `info`.
export type ValueControl = { kind: 'colour'; channels: number } | { kind: 'numbers'; channels: number };

export function valueControl(shape: number[], info: InputInfo | null): ValueControl {
  const plainImage = info?.layout === 'image' && !info.hint;
  if (shape.length === 3 && plainImage) return { kind: 'colour', channels: 1 };
  if (shape.length === 4) {
    const c = shape[1] ?? 1;
    if ((c === 1 || c === 3) && plainImage) return { kind: 'colour', channels: c };
    return { kind: 'numbers', channels: c <= 4 ? c : 1 };
  }
  return { kind: 'numbers', channels: 1 };
}

function rgbOf(hex: string): [number, number, number] {
  const m = /^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex);
  if (!m) return [1, 1, 1];
  return [parseInt(m[1]!, 16) / 255, parseInt(m[2]!, 16) / 255, parseInt(m[3]!, 16) / 255];
}

// The values a click sends: a colour in 0..1 normalised as the input was
// ((v - mean) / std, which the picture undid), or the numbers as typed.
export function perturbValues(choice: PerturbChoice, control: ValueControl, info: InputInfo | null): number[] {
  if (control.kind === 'numbers') return choice.values.slice(0, control.channels);
  const [r, g, b] = rgbOf(choice.colour);
  const pixel = control.channels === 1 ? [(r + g + b) / 3] : [r, g, b];
  // The normalisation is finite where it is set (the server writes a non-finite one as text).
  const at = (list: Num[] | undefined, c: number, fallback: number) => {
    const v = !list || list.length === 0 ? fallback : list.length === 1 ? list[0] : (list[c] ?? fallback);
    return typeof v === 'number' ? v : fallback;
  };
  return pixel.map((v, c) => (v - at(info?.mean, c, 0)) / at(info?.std, c, 1));
}

// The index a click at (fx, fy) (fractions of the picture) perturbs. A 4-D
// input that is not gray or RGB is drawn as a strip of one tile per channel,
// side by side (`strip`): the click is placed within the tile under it.
export function perturbIndex(shape: number[], fx: number, fy: number, strip = false): number[] {
  const cell = (frac: number, n: number) => Math.min(n - 1, Math.max(0, Math.floor(frac * n)));
  if (shape.length === 4 && strip) {
    const tiles = Math.max(1, shape[1]!);
    const within = fx * tiles - Math.min(tiles - 1, Math.floor(fx * tiles));
    return [cell(fy, shape[2]!), cell(within, shape[3]!)];
  }
  if (shape.length === 4) return [cell(fy, shape[2]!), cell(fx, shape[3]!)];
  if (shape.length === 3) return [cell(fy, shape[1]!), cell(fx, shape[2]!)];
  return [cell(fx, shape[shape.length - 1] ?? 1)];
}

// A switch's value the user chose; `answered`: the status when the
// command's answer came (the next pushed status replaces the choice).
interface Wanted {
  pinned?: boolean;
  mode?: ProbeMode;
  answered: Status | null;
}

interface Props {
  shape: number[];
  info: InputInfo | null;
  choice: PerturbChoice;
  setChoice: (c: PerturbChoice) => void;
  error: string | null;
  setError: (message: string | null) => void;
}

const MODES: { mode: ProbeMode; label: string; title: string }[] = [
  { mode: 'unchanged', label: 'Unchanged', title: 'Each module as training left it' },
  { mode: 'eval', label: 'Eval', title: 'Re-run the batch with the model in eval mode' },
  { mode: 'train', label: 'Train', title: 'Re-run the batch with the model in train mode (batch statistics, dropout)' },
];

// The probe's switches as the user set them, until the server shows them:
// `act` sends a command, and `wanted` is the pin or mode it asked for, shown
// until the pushed status has it (a push re-rendering the pane before the
// command's answer, or the answer before the push, must not flip the switch back).
function useProbeAction(status: Status | null, setError: (message: string | null) => void) {
  const [wanted, setWanted] = useState<Wanted | null>(null);
  useEffect(() => {
    if (wanted?.answered && status !== wanted.answered) setWanted(null);
  }, [status, wanted]);

  const act = (f: () => Promise<ProbeStatus>, want: Omit<Wanted, 'answered'> | null = null) => {
    setError(null);
    if (want) setWanted({ ...want, answered: null });
    f().then(
      () => {
        if (!want) return;
        const now = store.get().status;
        const shown = (want.pinned === undefined || now?.probe.pinned === want.pinned) &&
          (want.mode === undefined || now?.probe.mode === want.mode);
        // Already pushed: done; else wait for the next status.
        setWanted(shown ? null : { ...want, answered: now });
      },
      (e: unknown) => {
        setWanted(null);
        setError(e instanceof Error ? e.message : String(e));
      },
    );
  };
  return { wanted, act };
}

type Act = ReturnType<typeof useProbeAction>['act'];

export function ProbeControls({ shape, info, choice, setChoice, error, setError }: Props) {
  const probe = useSelector(store, (s) => s.status?.probe ?? null);
  const paused = useSelector(store, (s) => s.status?.state === 'paused');
  const hasBatch = useSelector(store, (s) => s.sequence > 0);
  const status = useSelector(store, (s) => s.status);
  const { wanted, act } = useProbeAction(status, setError);
  if (!probe) return null;

  const pinned = wanted?.pinned ?? probe.pinned;
  const mode = wanted?.mode ?? probe.mode;
  const count = probe.perturbations.length;
  const shownError = error ?? probe.error ?? null;

  return (
    <div class="probe" data-testid="probe" data-tour="probe">
      <div class="probe-row">
        <label class="switch" title={hasBatch ? 'Re-run this batch at every later capture' : 'Nothing to pin yet'}>
          <input
            type="checkbox"
            data-testid="probe-pin"
            checked={pinned}
            disabled={!pinned && (!paused || !hasBatch)}
            onChange={() => act(pinned ? unpinBatch : pinBatch, { pinned: !pinned })}
          />
          <span class="switch-track" aria-hidden="true" />
          <span>Pin batch</span>
        </label>
        {pinned && probe.pinned_position && (
          <span class="muted mono" data-testid="probe-pinned-at">
            pinned at {probe.pinned_position.text}
          </span>
        )}
        {!hasBatch && <span class="muted">Nothing to pin yet.</span>}
      </div>
      <div class="probe-row">
        <span class="muted">Forward mode</span>
        <div class="segmented" role="group" aria-label="Forward mode">
          {MODES.map((m) => (
            <button
              key={m.mode}
              class={`segment ${mode === m.mode ? 'is-on' : ''}`}
              data-testid={`probe-mode-${m.mode}`}
              aria-pressed={mode === m.mode}
              title={m.title}
              disabled={!paused && m.mode !== 'unchanged'}
              onClick={() => mode !== m.mode && act(() => setProbeMode(m.mode), { mode: m.mode })}
            >
              {m.label}
            </button>
          ))}
        </div>
      </div>
      <PerturbRow shape={shape} info={info} choice={choice} setChoice={setChoice} paused={paused} count={count} act={act} />
      {count > 0 && (
        <div class="probe-row">
          <span data-testid="probe-count">
            {count} perturbed {shape.length >= 3 ? (count === 1 ? 'pixel' : 'pixels') : count === 1 ? 'value' : 'values'}
          </span>
          <button class="btn btn-quiet btn-small" data-testid="probe-clear" onClick={() => act(clearPerturbations)}>
            Clear
          </button>
        </div>
      )}
      {probe.active && probe.result && !probe.error && (
        <div class="muted" data-testid="probe-caption">
          {probe.result.diff
            ? 'The strips show perturbed − original.'
            : `The strips show the probe (run ${probe.result.run}, ${probe.mode} mode).`}
        </div>
      )}
      {probe.active && probe.pending && <div class="muted">Probe running…</div>}
      {status?.locked && (
        <div class="muted" data-testid="probe-own">
          Your probe: only you see it.
        </div>
      )}
      {shownError && (
        <div class="error-text" data-testid="probe-error">
          {shownError}
        </div>
      )}
    </div>
  );
}

// Click to perturb, and what a click sets: a colour or a number per channel.
function PerturbRow({
  shape,
  info,
  choice,
  setChoice,
  paused,
  count,
  act,
}: Pick<Props, 'shape' | 'info' | 'choice' | 'setChoice'> & { paused: boolean; count: number; act: Act }) {
  const control = valueControl(shape, info);
  return (
    <div class="probe-row">
      <label class="switch" title="Click the input to set values there">
        <input
          type="checkbox"
          data-testid="probe-perturb"
          checked={choice.on}
          disabled={!paused && !choice.on}
          onChange={(e) => {
            const on = e.currentTarget.checked;
            setChoice({ ...choice, on });
            // Switching perturb off clears the edits.
            if (!on && count > 0) act(clearPerturbations);
          }}
        />
        <span class="switch-track" aria-hidden="true" />
        <span>Click to perturb</span>
      </label>
      {choice.on && control.kind === 'colour' && (
        <input
          type="color"
          data-testid="probe-colour"
          value={choice.colour}
          title="The colour a click paints"
          onInput={(e) => setChoice({ ...choice, colour: e.currentTarget.value })}
        />
      )}
      {choice.on &&
        control.kind === 'numbers' &&
        Array.from({ length: control.channels }, (_, c) => (
          <input
            key={c}
            type="number"
            class="probe-value"
            data-testid={`probe-value-${c}`}
            step="any"
            value={choice.values[c] ?? 0}
            title={control.channels > 1 ? `Channel ${c}` : shape.length === 4 ? 'Every channel' : 'The value'}
            onInput={(e) => {
              const v = e.currentTarget.valueAsNumber;
              if (Number.isNaN(v)) return;
              const values = Array.from({ length: control.channels }, (_, i) => choice.values[i] ?? 0);
              values[c] = v;
              setChoice({ ...choice, values });
            }}
          />
        ))}
    </div>
  );
}
