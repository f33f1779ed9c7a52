// Batch positions: the label text and their order within a run.
import type { Position, Schedule } from '../api/types';

// "epoch 0/3 | train batch 4/20", totals only once the schedule knows them.
export function positionLabel(position: Position | null, schedule: Schedule | null): string {
  if (!position) return '(waiting for first batch)';
  const epochs = schedule?.epochs;
  const batches = schedule?.phases.find((p) => p.name === position.phase)?.batches;
  const e = epochs != null ? `${position.epoch}/${epochs}` : `${position.epoch}`;
  const b = batches != null ? `${position.batch_idx}/${batches}` : `${position.batch_idx}`;
  return `epoch ${e} | ${position.phase} batch ${b}`;
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
