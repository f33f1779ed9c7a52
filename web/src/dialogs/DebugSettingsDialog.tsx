// The gear: the statistics sections (applied on change), then the error-check
// settings, loaded from GET /api/debug and saved as a partial update (only
// what changed). The server validates; its refusal is shown beside the form.
import { useEffect, useState } from 'preact/hooks';
import * as api from '../api/client';
import type { DebugSettings } from '../api/types';
import { store, toast } from '../state/app';
import { saveDebugSettings } from '../state/debug';
import { useSelector } from '../state/store';
import { Modal } from './Modal';
import { RecordingSection } from './RecordingSection';
import { StatsSettings } from './StatsSettings';

export function DebugSettingsHost() {
  const open = useSelector(store, (s) => s.debugSettingsOpen);
  return open ? <DebugSettingsDialog /> : null;
}

// The form's fields as typed: numbers stay text until saved, so a half-typed
// value is not rewritten under the cursor.
interface Form {
  enabled: boolean;
  interval: string;
  nanInf: boolean;
  underOver: boolean;
  threshold: string;
  traceInterval: string;
  rerun: boolean;
  allow: string;
}

function formOf(s: DebugSettings): Form {
  return {
    enabled: s.enabled,
    interval: String(s.interval_batches),
    nanInf: s.check_nan_inf,
    underOver: s.check_under_over,
    threshold: String(s.threshold_fraction),
    traceInterval: String(s.trace_interval_batches),
    rerun: s.rerun_to_trace,
    allow: s.allow.join('\n'),
  };
}

function parseAllow(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

type Patch = Partial<Omit<DebugSettings, 'capsule_dir'>>;

// What differs from the loaded settings, or a local problem (a field that is
// not a number at all; ranges are the server's to judge).
function diff(form: Form, base: DebugSettings): { patch: Patch; problem: string | null } {
  const patch: Patch = {};
  const number = (text: string, name: string): number | string => {
    const v = Number(text.trim());
    return text.trim() === '' || !Number.isFinite(v) ? `${name} must be a number.` : v;
  };
  if (form.enabled !== base.enabled) patch.enabled = form.enabled;
  if (form.nanInf !== base.check_nan_inf) patch.check_nan_inf = form.nanInf;
  if (form.underOver !== base.check_under_over) patch.check_under_over = form.underOver;
  if (form.rerun !== base.rerun_to_trace) patch.rerun_to_trace = form.rerun;
  const interval = number(form.interval, 'Check every');
  if (typeof interval === 'string') return { patch, problem: interval };
  if (interval !== base.interval_batches) patch.interval_batches = interval;
  const threshold = number(form.threshold, 'The under/overflow threshold');
  if (typeof threshold === 'string') return { patch, problem: threshold };
  if (threshold !== base.threshold_fraction) patch.threshold_fraction = threshold;
  const trace = number(form.traceInterval, 'Trace every');
  if (typeof trace === 'string') return { patch, problem: trace };
  if (trace !== base.trace_interval_batches) patch.trace_interval_batches = trace;
  const allow = parseAllow(form.allow);
  if (allow.join('\n') !== base.allow.join('\n')) patch.allow = allow;
  return { patch, problem: null };
}

// The error-check form: the settings as loaded, the fields as typed, what
// changed (or why it cannot be saved), and saving it.
function useDebugSettingsForm(close: () => void) {
  const [base, setBase] = useState<DebugSettings | null>(null);
  const [form, setForm] = useState<Form | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [serverError, setServerError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    const abort = new AbortController();
    api.getDebug(abort.signal).then(
      (r) => {
        setBase(r.settings);
        setForm(formOf(r.settings));
      },
      (e: Error) => {
        if (e.name !== 'AbortError') setLoadError(e.message);
      },
    );
    return () => abort.abort();
  }, []);

  const update = (patch: Partial<Form>) => {
    setForm((f) => (f ? { ...f, ...patch } : f));
    setServerError(null);
  };

  const checked = form && base ? diff(form, base) : null;
  const changed = checked ? Object.keys(checked.patch).length > 0 : false;
  const message = checked?.problem ?? serverError;

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!checked || checked.problem || busy) return;
    if (!changed) return close();
    setBusy(true);
    const refusal = await saveDebugSettings(checked.patch);
    setBusy(false);
    if (refusal) {
      setServerError(refusal);
    } else {
      toast('Error-check settings saved', 'info');
      close();
    }
  };

  return { base, form, loadError, update, checked, changed, message, busy, submit };
}

type Update = (patch: Partial<Form>) => void;

function DebugSettingsDialog() {
  const close = () => store.set({ debugSettingsOpen: false });
  const { base, form, loadError, update, checked, changed, message, busy, submit } = useDebugSettingsForm(close);
  return (
    <Modal title="Settings" testid="debug-settings-dialog" onClose={close} wide>
      <StatsSettings />
      <RecordingSection />
      <h3 class="settings-heading">Error checks</h3>
      {loadError && <p class="form-error">{loadError}</p>}
      {!form && !loadError && <p class="form-note">Loading…</p>}
      {form && base && (
        <form class="form settings-form" onSubmit={submit}>
          <p class="form-note">
            Checks for NaN/±Inf in activations and gradients and for gradients in the under/overflow band; the first hit
            pauses the run and names the op that produced it.
          </p>
          <label class="switch-row">
            <input type="checkbox" data-testid="settings-enabled" checked={form.enabled} onChange={(e) => update({ enabled: e.currentTarget.checked })} />
            <span>Enable error checks</span>
          </label>
          <ChecksFieldset form={form} update={update} />
          <p class="form-hint">
            NaN capsules go to <span class="mono">{base.capsule_dir || '(nowhere: capsules are off)'}</span>
          </p>
          <div class="form-error" role="alert" data-testid="settings-error">
            {message}
          </div>
          <div class="form-actions">
            <button type="button" class="btn btn-quiet" data-testid="settings-cancel" onClick={close}>
              Cancel
            </button>
            <button type="submit" class="btn btn-step" data-testid="settings-save" disabled={busy || checked?.problem != null}>
              {changed ? 'Save' : 'Close'}
            </button>
          </div>
        </form>
      )}
    </Modal>
  );
}

// The checks and their parameters (disabled while error checks are off).
function ChecksFieldset({ form, update }: { form: Form; update: Update }) {
  const threshold = Number(form.threshold);
  return (
    <fieldset class="settings-group" disabled={!form.enabled}>
      <label class="settings-row">
        <span>Check every</span>
        <input type="number" min={1} step={1} data-testid="settings-interval" value={form.interval} onInput={(e) => update({ interval: e.currentTarget.value })} />
        <span class="form-hint">batches (1 = every batch)</span>
      </label>
      <label class="switch-row">
        <input type="checkbox" data-testid="settings-nan-inf" checked={form.nanInf} onChange={(e) => update({ nanInf: e.currentTarget.checked })} />
        <span>NaN / ±Inf</span>
      </label>
      <p class="form-hint settings-note" data-testid="settings-inf-rule">
        An explicit ±inf fill (masked_fill, where, full, fill given an infinite value — an attention mask) is intended
        and does not trip, nor does arithmetic that only carries it along; a NaN, or an Inf made by arithmetic, still
        trips. Use the allow-list for other intended values.
      </p>
      <label class="switch-row">
        <input type="checkbox" data-testid="settings-under-over" checked={form.underOver} onChange={(e) => update({ underOver: e.currentTarget.checked })} />
        <span>Underflow / overflow (gradients, per dtype)</span>
      </label>
      <label class="settings-row">
        <span>Band threshold</span>
        <input
          type="number"
          step="any"
          data-testid="settings-threshold"
          disabled={!form.underOver}
          value={form.threshold}
          onInput={(e) => update({ threshold: e.currentTarget.value })}
        />
        <span class="form-hint">
          fraction of a layer's summed |grad| in the band, in (0, 1]
          {Number.isFinite(threshold) && threshold > 0 && threshold <= 1 ? ` — ${Number((threshold * 100).toPrecision(3))}%` : ''}
        </span>
      </label>
      <label class="settings-row">
        <span>Trace every</span>
        <input type="number" min={0} step={1} data-testid="settings-trace-interval" value={form.traceInterval} onInput={(e) => update({ traceInterval: e.currentTarget.value })} />
        <span class="form-hint">batches at op level (0 = only captured batches; ~10% cost on those)</span>
      </label>
      <label class="switch-row">
        <input type="checkbox" data-testid="settings-rerun" checked={form.rerun} onChange={(e) => update({ rerun: e.currentTarget.checked })} />
        <span>Re-run an untraced batch that tripped, traced, to name the producer</span>
      </label>
      <label class="settings-allow">
        <span>Allowed non-finite (op or layer names, one a line)</span>
        <textarea
          rows={3}
          data-testid="settings-allow"
          placeholder={'masked_fill\nencoder.attention'}
          value={form.allow}
          onInput={(e) => update({ allow: e.currentTarget.value })}
        />
      </label>
    </fieldset>
  );
}
