// Batch positions: the label text and their order within a run.
import type { Position, Schedule, TrainerStep } from '../api/types';

// "epoch 0/3 | train batch 4/20", totals only once the schedule knows them.
export function positionLabel(position: Position | null, schedule: Schedule | null): string {
  if (!position) return '(waiting for first batch)';
  const epochs = schedule?.epochs;
  const batches = schedule?.phases.find((p) => p.name === position.phase)?.batches;
  const e = epochs != null ? `${position.epoch}/${epochs}` : `${position.epoch}`;
  const b = batches != null ? `${position.batch_idx}/${batches}` : `${position.batch_idx}`;
  return `epoch ${e} | ${position.phase} batch ${b}`;
}

// A trainer's words for a batch (the Hugging Face Trainer's callback): one
// batch is one optimizer step. "global step 7 · micro-batch 2 of 4" while a
// micro-batch runs, "global step 7 · 4 micro-batches" otherwise; "" for a
// plain loop. Micro-batches are counted from 1, as the layers of the second
// are named "h.0#2".
export function trainerStepLabel(step: TrainerStep | null | undefined): string {
  if (!step) return '';
  const words = [`global step ${step.global_step}`];
  if (step.micro_batches > 1) {
    words.push(
      step.micro_batch != null
        ? `micro-batch ${step.micro_batch + 1} of ${step.micro_batches}`
        : `${step.micro_batches} micro-batches`,
    );
  }
  return words.join(' · ');
}

// What a snapshot of a step with gradient accumulation shows: the
// micro-batches up to the one it was taken in (at a NaN's pause), or all of
// them at the step's end; their layers are named "#2", "#3", ... from the
// second on. "" for a step of one micro-batch and for plain loops.
export function snapshotMicroBatches(step: TrainerStep | null | undefined): string {
  if (!step || step.micro_batches <= 1) return '';
  const n = step.micro_batches;
  if (step.micro_batch == null) return `shows all ${n} micro-batches (layers #2… from the second)`;
  const upTo = step.micro_batch + 1;
  return upTo === 1
    ? `shows micro-batch 1 of ${n}, taken mid-step`
    : `shows micro-batches 1–${upTo} of ${n}, taken mid-step (layers #2… from the second)`;
}

export interface Target {
  epoch: number;
  phase: string;
  batch: number;
}

// Negative, zero or positive as `a` comes before, at or after `b`. Phases
// run in schedule order within an epoch; an unknown phase sorts last.
export function comparePositions(a: Target, b: Target, schedule: Schedule): number {
  if (a.epoch !== b.epoch) return a.epoch - b.epoch;
  const order = (name: string) => {
    const i = schedule.phases.findIndex((p) => p.name === name);
    return i < 0 ? schedule.phases.length : i;
  };
  if (a.phase !== b.phase) return order(a.phase) - order(b.phase);
  return a.batch - b.batch;
}

export function targetText(t: Target): string {
  return `epoch ${t.epoch} | ${t.phase} batch ${t.batch}`;
}
