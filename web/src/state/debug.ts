// The standing numerical error: its full report, where it sits in the
// diagram, bringing that layer into view once per error, and the commands
// that silence, clear or reconfigure the checks.
import * as api from '../api/client';
import type {
  Architecture,
  DebugCheck,
  DebugErrorSummary,
  DebugReport,
  DebugSettings,
  ProducerBrief,
  UpdateAction,
} from '../api/types';
import { requestFocus, store, toast, visibleNames, type AppState } from './app';
import { applyStatus } from './sync';

// How a layer of the diagram took part in the error:
// - producer: the producer op ran in this layer;
// - entry: the producer ran outside the model (the loss, the data), and the
//   non-finite values entered the model's layers here;
// - worst: an under/overflow error (no producer): the layer with the largest
//   share of its gradient in the band;
// - propagator: non-finite (or banded) values passed through.
export type DebugMark = 'producer' | 'entry' | 'worst' | 'propagator';

export interface DebugMarks {
  focus: string | null;
  focusMark: Exclude<DebugMark, 'propagator'> | null;
  marks: Map<string, DebugMark>;
  // Whether the marks are final (false while the report is still loading).
  complete: boolean;
}

const NO_MARKS: DebugMarks = { focus: null, focusMark: null, marks: new Map(), complete: true };

// Marks go only on layers that have a node and a card (`names`): a producer
// in a folded shape op falls back to where the values entered the layers on
// show, as a producer outside the model does.
function compute(
  error: DebugErrorSummary | null,
  report: DebugReport | null,
  arch: Architecture | null,
  names: Set<string>,
): DebugMarks {
  if (!error || !arch?.captured) return NO_MARKS;
  const rows = (report?.error?.layers ?? []).filter((r) => names.has(r.layer));
  const loaded = report?.error != null;
  let focus: string | null = null;
  let focusMark: DebugMarks['focusMark'] = null;
  const producerLayer = error.producer?.layer;
  if (producerLayer && names.has(producerLayer)) {
    focus = producerLayer;
    // from_outside: the op only saw values that were already non-finite
    // (weights an earlier step wrote, the input): they entered here.
    focusMark = error.root_cause_status === 'from_outside' ? 'entry' : 'producer';
  } else if (loaded && rows.length) {
    if (error.producer || error.reasons.some((r) => r === 'nan' || r === 'inf')) {
      // Rows come in graph order. Values that reached an activation entered
      // at the first such layer; values only in gradients came in from the
      // loss, backward, at the last layer they reached.
      const forward = rows.find((r) => r.sources.includes('activation') && r.nan + r.inf > 0);
      focus = (forward ?? rows.filter((r) => r.nan + r.inf > 0).at(-1) ?? rows.at(-1)!).layer;
      focusMark = 'entry';
    } else {
      let worst = rows[0]!;
      for (const r of rows) if (Math.max(r.underflow, r.overflow) > Math.max(worst.underflow, worst.overflow)) worst = r;
      focus = worst.layer;
      focusMark = 'worst';
    }
  }
  const marks = new Map<string, DebugMark>();
  const passed = [...error.layers, ...(report?.error?.root_cause?.propagators ?? []).map((p) => p.layer)];
  for (const name of passed) if (name && names.has(name) && name !== focus) marks.set(name, 'propagator');
  if (focus && focusMark) marks.set(focus, focusMark);
  // While the batch is re-run to trace it, the producer is yet to come.
  const fromProducer = focus != null && focus === producerLayer;
  return { focus, focusMark, marks, complete: error.root_cause_status !== 'pending' && (fromProducer || loaded) };
}

// One entry: every node and card asks on every store change.
let memo: { error: unknown; report: unknown; arch: unknown; names: unknown; marks: DebugMarks } | null = null;

export function debugMarks(s: AppState): DebugMarks {
  const error = s.status?.debug?.error ?? null;
  const report = s.debugReport;
  const arch = s.architecture;
  const names = visibleNames(s);
  if (!memo || memo.error !== error || memo.report !== report || memo.arch !== arch || memo.names !== names) {
    memo = { error, report, arch, names, marks: compute(error, report, arch, names) };
  }
  return memo.marks;
}

export function debugMarkOf(s: AppState, layer: string): DebugMark | null {
  return debugMarks(s).marks.get(layer) ?? null;
}

export const MARK_TEXT: Record<DebugMark, string> = {
  producer: 'the first non-finite value was produced here',
  entry: 'non-finite values entered the model here',
  worst: 'most of its gradient is in the under/overflow band',
  propagator: 'non-finite or banded values passed through',
};

// "first produced by aten::div in the forward pass, outside the model's
// layers (the loss?)", or what is known instead; null when nothing is.
export function producerPhrase(error: DebugErrorSummary): string | null {
  const p: ProducerBrief | null = error.producer;
  if (p) {
    const pass = p.pass === 'backward' ? 'the backward pass' : p.pass === 'forward' ? 'the forward pass' : p.pass;
    const where = `${p.op} in ${pass} ${p.layer ? `of ${p.layer}` : ", outside the model's layers (the loss?)"}`.replace(' ,', ',');
    return error.root_cause_status === 'from_outside'
      ? `already non-finite when the batch began (weights or input); first seen by ${where}`
      : `first produced by ${where}`;
  }
  switch (error.root_cause_status) {
    case 'pending':
      return 're-running the batch to find the op that produced it…';
    case 'from_outside':
      return 'already non-finite where the traced ops begin (the input or the weights?)';
    case 'not_reproduced':
      return 'a traced re-run of the batch stayed finite';
    case 'compiled_only':
      return 'compiled-only numerics: the batch went non-finite compiled (torch.compile), its eager re-run stayed finite';
    default:
      return null;
  }
}

// The error's identity: the first position is kept while later hits merge.
function errorKey(s: AppState): string | null {
  const e = s.status?.debug?.error;
  return e ? `${s.generation}|${e.position.text}|${e.capsule ?? ''}` : null;
}

// ---- Keeping the report in step with the pushed summary ----

let fetchedFor = '';
let fetches = 0;
const focused = new Set<string>();

async function fetchReport(): Promise<void> {
  const mine = ++fetches;
  try {
    const report = await api.getDebug();
    if (mine === fetches) store.set({ debugReport: report });
  } catch (e) {
    if (mine === fetches) fetchedFor = ''; // try again on the next change
    if (e instanceof api.ApiError) toast(`Could not load the numerical report: ${e.message}`);
  }
}

function onChange(): void {
  const s = store.get();
  const error = s.status?.debug?.error ?? null;
  const key = `${s.generation}|${JSON.stringify(error)}`;
  if (key !== fetchedFor) {
    fetchedFor = key;
    if (error) void fetchReport();
    else if (s.debugReport?.error) {
      fetches += 1; // drop answers still in flight
      store.set({ debugReport: null });
    }
  }
  // Bring the layer into view once per error; afterwards the user decides.
  const id = errorKey(s);
  if (!id || focused.has(id)) return;
  const m = debugMarks(s);
  if (!m.complete || !s.architecture?.captured) return;
  focused.add(id);
  if (!m.focus) return;
  if (!s.shown.includes(m.focus)) store.set({ shown: [...s.shown, m.focus] });
  requestFocus(m.focus, 'both');
}

export function startDebugWatch(): () => void {
  onChange();
  return store.subscribe(onChange);
}

// ---- Commands ----

function afterReply(report: DebugReport): void {
  // The push carries the new status; the report is newer than ours.
  store.set({ debugReport: report.error ? report : null });
  if (store.get().connection !== 'open') void api.getStatus().then(applyStatus, () => {});
}

const CHECK_NAMES: Record<DebugCheck, string> = { nan_inf: 'NaN / ±Inf', under_over: 'under/overflow' };

export function categoriesOf(error: DebugErrorSummary): DebugCheck[] {
  const out: DebugCheck[] = [];
  if (error.reasons.some((r) => r === 'nan' || r === 'inf')) out.push('nan_inf');
  if (error.reasons.some((r) => r === 'underflow' || r === 'overflow')) out.push('under_over');
  return out;
}

// Turns off the checks behind the standing error, which clears it.
export async function silenceDebug(): Promise<void> {
  const error = store.get().status?.debug?.error;
  try {
    const report = await api.silenceDebug();
    afterReply(report);
    store.set({ debugDialogOpen: false });
    const names = error ? categoriesOf(error).map((c) => CHECK_NAMES[c]) : [];
    toast(`Silenced the ${names.join(' and ') || 'present'} check${names.length > 1 ? 's' : ''}; the gear turns ${names.length > 1 ? 'them' : 'it'} back on.`, 'info');
  } catch (e) {
    toast(e instanceof Error ? e.message : String(e));
  }
}

// Dismisses the standing error and keeps checking: the next hit pauses again.
export async function clearDebug(): Promise<void> {
  try {
    afterReply(await api.clearDebug());
    store.set({ debugDialogOpen: false });
  } catch (e) {
    toast(e instanceof Error ? e.message : String(e));
  }
}

// Skips or applies the optimizer update held back by the standing error; the
// loop does it when it resumes.
export async function chooseUpdate(action: UpdateAction): Promise<void> {
  try {
    afterReply(await api.chooseUpdate(action));
  } catch (e) {
    toast(e instanceof Error ? e.message : String(e));
  }
}

// Returns the server's refusal, or null once saved.
export async function saveDebugSettings(patch: Partial<Omit<DebugSettings, 'capsule_dir'>>): Promise<string | null> {
  try {
    afterReply(await api.setDebugSettings(patch));
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

export function openDebugDialog(): void {
  store.set({ debugDialogOpen: true });
  // Fresh numbers: later hits merge into the error.
  fetchedFor = '';
  onChange();
}
