// The Experiment form's values per kind: the kind's defaults, what is shown,
// and what is sent (numbers checked for being numbers; the server validates
// the rest).
import type { ExperimentKind, ExperimentParamSpec } from '../api/types';

export type Values = Record<string, string | boolean>;

export function defaultsOf(kind: ExperimentKind): Values {
  const v: Values = {};
  for (const p of kind.params) v[p.key] = p.type === 'boolean' ? Boolean(p.default) : String(p.default);
  return v;
}

// The params to send, or the labels of numbers left empty or unreadable.
export function paramsOf(kind: ExperimentKind, values: Values): { params: Record<string, unknown>; missing: string[] } {
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
export function visible(p: ExperimentParamSpec, values: Values): boolean {
  return p.key !== 'sample' || values.start === 'sample';
}
