// Step custom…: run until an exact epoch / phase / batch. Targets the page can
// already tell are wrong are refused here with the reason; anything the
// server still refuses shows its message in the same place.
import { useState } from 'preact/hooks';
import type { Position, Schedule } from '../api/types';
import { runUntil } from '../state/commands';
import { store } from '../state/app';
import { comparePositions, targetText, type Target } from '../state/position';
import { useSelector } from '../state/store';
import { Modal } from './Modal';

export function CustomStepDialogHost() {
  const open = useSelector(store, (s) => s.customDialogOpen);
  const status = useSelector(store, (s) => s.status);
  if (!open || !status) return null;
  return <CustomStepDialog live={status.live_position} schedule={status.schedule} />;
}

function initialTarget(live: Position | null, schedule: Schedule): Target {
  if (!live) return { epoch: 0, phase: schedule.phases[0]?.name ?? '', batch: 0 };
  const count = schedule.phases.find((p) => p.name === live.phase)?.batches;
  const next = count == null || live.batch_idx + 1 < count ? live.batch_idx + 1 : live.batch_idx;
  return { epoch: live.epoch, phase: live.phase, batch: next };
}

// Why the target cannot be reached, or null.
export function targetProblem(t: Target, live: Position | null, schedule: Schedule): string | null {
  if (!Number.isInteger(t.epoch) || !Number.isInteger(t.batch)) return 'Epoch and batch must be whole numbers.';
  if (t.epoch < 0 || t.batch < 0) return 'Epoch and batch must not be negative.';
  if (!t.phase) return 'Choose a phase.';
  if (schedule.epochs != null && t.epoch >= schedule.epochs) {
    return `Epoch ${t.epoch} is out of range: the run has ${schedule.epochs} epochs (0–${schedule.epochs - 1}).`;
  }
  const count = schedule.phases.find((p) => p.name === t.phase)?.batches;
  if (count != null && t.batch >= count) {
    return `Batch ${t.batch} is out of range: phase '${t.phase}' has ${count} batches (0–${count - 1}).`;
  }
  if (live && comparePositions(t, { epoch: live.epoch, phase: live.phase, batch: live.batch_idx }, schedule) <= 0) {
    return `Target must be after the current position ${live.text}`;
  }
  return null;
}

function CustomStepDialog({ live, schedule }: { live: Position | null; schedule: Schedule }) {
  const [target, setTarget] = useState(() => initialTarget(live, schedule));
  const [serverError, setServerError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const close = () => store.set({ customDialogOpen: false });

  const problem = targetProblem(target, live, schedule);
  const phaseIndex = schedule.phases.findIndex((p) => p.name === target.phase);
  const count = schedule.phases[phaseIndex]?.batches;
  const update = (patch: Partial<Target>) => {
    setTarget({ ...target, ...patch });
    setServerError(null);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    if (problem || busy) return;
    setBusy(true);
    const refusal = await runUntil(target.phase, target.epoch, target.batch);
    setBusy(false);
    if (refusal) setServerError(refusal);
    else close();
  };

  const message = problem ?? serverError;
  return (
    <Modal title="Step until…" testid="custom-dialog" onClose={close}>
      <form class="form" onSubmit={submit}>
        <p class="form-note">
          Runs training and pauses at the chosen batch. Now at <span class="mono">{live?.text ?? '(no batch yet)'}</span>.
        </p>
        <label class="form-row">
          <span>Epoch</span>
          <input
            type="number"
            data-testid="custom-epoch"
            min={0}
            max={schedule.epochs != null ? schedule.epochs - 1 : undefined}
            value={target.epoch}
            onInput={(e) => update({ epoch: e.currentTarget.valueAsNumber })}
          />
          <span class="form-hint">
            {schedule.epochs != null ? `of ${schedule.epochs} (0–${schedule.epochs - 1})` : 'total not known yet'}
          </span>
        </label>
        <label class="form-row">
          <span>Phase</span>
          <select data-testid="custom-phase" value={target.phase} onChange={(e) => update({ phase: e.currentTarget.value })}>
            {schedule.phases.map((p) => (
              <option key={p.name} value={p.name}>
                {p.name}
              </option>
            ))}
          </select>
          <span class="form-hint">{phaseIndex >= 0 ? `phase ${phaseIndex} of ${schedule.phases.length}` : ''}</span>
        </label>
        <label class="form-row">
          <span>Batch</span>
          <input
            type="number"
            data-testid="custom-batch"
            min={0}
            max={count != null ? count - 1 : undefined}
            value={target.batch}
            onInput={(e) => update({ batch: e.currentTarget.valueAsNumber })}
          />
          <span class="form-hint" data-testid="custom-hint">
            {count != null
              ? `'${target.phase}' has ${count} batches (0–${count - 1})`
              : 'batch count not known yet — learned once the phase has run through'}
          </span>
        </label>
        <div class="form-error" role="alert" data-testid="custom-error">
          {message}
        </div>
        <div class="form-actions">
          <button type="button" class="btn btn-quiet" data-testid="custom-cancel" onClick={close}>
            Cancel
          </button>
          <button type="submit" class="btn btn-step" data-testid="custom-submit" disabled={problem != null || busy}>
            {problem ? 'Step' : `Step to ${targetText(target)}`}
          </button>
        </div>
      </form>
    </Modal>
  );
}
