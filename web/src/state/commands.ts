// Run-control commands from the top bar and dialogs.
import * as api from '../api/client';
import type { Status, StepUnit } from '../api/types';
import { store, toast } from './app';
import { applyStatus } from './sync';

// Returns the server's refusal, if any; toasts it unless the caller shows it.
async function send(command: () => Promise<Status>, showError = true): Promise<string | null> {
  try {
    const status = await command();
    // The push channel is the one ordered source of status: a reply can
    // arrive after a push that is newer than it (Run at the last batch:
    // "running" in the reply, "finished" already pushed). Only without
    // the channel is the reply the best news there is.
    if (store.get().connection !== 'open') applyStatus(status);
    return null;
  } catch (e) {
    const message = e instanceof Error ? e.message : String(e);
    if (showError) toast(message);
    return message;
  }
}

// Stepping past the run's final batch ends training; the original NaNsense
// 0.4.0 (Python, on PyPI) asks first.
function confirmingLastBatch(command: () => Promise<Status>): void {
  const status = store.get().status;
  if (status?.state === 'paused' && status.live_position?.is_last_in_run) {
    store.set({ confirmLastBatch: () => void send(command) });
  } else {
    void send(command);
  }
}

export const run = () => confirmingLastBatch(api.run);
export const stepBy = (unit: StepUnit) => confirmingLastBatch(() => api.step(unit));
export const pause = () => void send(api.pause);
export const detach = () => void send(api.detach);
export const refresh = () => void send(api.refresh);
// The custom-step dialog shows a refusal itself, beside the fields.
export const runUntil = (phase: string, epoch: number, batch: number) =>
  send(() => api.runUntil(phase, epoch, batch), false);

export function resolveLastBatchConfirm(proceed: boolean): void {
  const pending = store.get().confirmLastBatch;
  store.set({ confirmLastBatch: null });
  if (proceed) pending?.();
}

// The time-travel dialog shows a refusal itself.
export const timeTravel = (epoch: number) => send(() => api.timeTravel(epoch), false);
export const cacheFullRun = () => send(api.run, false);
