// Experiment results as the push channel announces them (progress while a run
// goes on, then its outcome). The Experiment page listens here instead of
// polling; on a reconnect it fetches its run once (events sent while the link
// was down are gone).
import type { ExperimentKindName, ExperimentResult } from '../api/types';
import { createStore } from './store';

type Listener = (result: ExperimentResult) => void;

const listeners = new Set<Listener>();
// The newest pushed state of the last few runs: a run's first events can
// arrive before the reply to the request that started it.
const latest = new Map<number, ExperimentResult>();
const KEEP = 16;

export function onExperimentResult(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export function experimentPushed(result: ExperimentResult): void {
  latest.delete(result.seq);
  latest.set(result.seq, result);
  if (latest.size > KEEP) latest.delete(latest.keys().next().value as number);
  for (const listener of listeners) listener(result);
}

export function latestPushed(seq: number): ExperimentResult | undefined {
  return latest.get(seq);
}

const STAGE_ORDER: Record<string, number> = { absent: 0, queued: 1, running: 2, done: 3, stopped: 3, failed: 3 };

// Whether `a` is a later state of the same run than `b`.
export function isNewer(a: ExperimentResult, b: ExperimentResult): boolean {
  const sa = STAGE_ORDER[a.stage] ?? 0;
  const sb = STAGE_ORDER[b.stage] ?? 0;
  return sa !== sb ? sa > sb : a.step > b.step;
}

// This tab's name for its auto experiment: unique per page load, so two tabs
// (or a reload beside the old page's expiring entry) never share one.
export const tabId = `tab-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;

// The experiment the Experiment page's form describes now (null while the
// form is incomplete): what the gear's Recording section records there.
export interface FormExperiment {
  kind: ExperimentKindName;
  layer: string;
  params: Record<string, unknown>;
}
export const experimentForm = createStore<{ form: FormExperiment | null }>({ form: null });
