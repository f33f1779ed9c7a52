// "Numerical issue detected": what tripped, where, the op that produced it
// and the ones that only passed it on, the per-layer table, and how to replay
// the batch from its capsule.
import type { DebugBand, DebugError, DebugErrorSummary, DebugReason, LayerReport, OpReport, TensorStats } from '../api/types';
import { shapeText } from '../cards/geometry';
import { formatNum } from '../format';
import { requestFocus, store, toast, visibleNames } from '../state/app';
import { clearDebug, debugMarks, MARK_TEXT, silenceDebug } from '../state/debug';
import { useSelector } from '../state/store';
import { Modal } from './Modal';
import { UpdateChoice, updateDoneText } from './UpdateChoice';

export function DebugDialogHost() {
  const open = useSelector(store, (s) => s.debugDialogOpen);
  const summary = useSelector(store, (s) => s.status?.debug?.error ?? null);
  const report = useSelector(store, (s) => s.debugReport);
  if (!open) return null;
  const close = () => store.set({ debugDialogOpen: false });
  const error = report?.error ?? null;
  return (
    <Modal title="Numerical issue detected" testid="debug-dialog" onClose={close} wide>
      {!summary ? (
        <p class="form-note">No numerical issue is standing: it was silenced or cleared.</p>
      ) : !error ? (
        <p class="form-note">Loading the report…</p>
      ) : (
        <DebugDetails error={error} summary={summary} />
      )}
      <div class="form-actions">
        {summary && (
          <>
            <button
              class="btn btn-quiet"
              data-testid="debug-clear"
              title="Dismiss this warning and keep checking: the next hit pauses the run again"
              onClick={() => void clearDebug()}
            >
              Dismiss, keep checking
            </button>
            <button
              class="btn btn-quiet"
              data-testid="debug-silence"
              title="Turn off the checks that tripped (the gear turns them back on)"
              onClick={() => void silenceDebug()}
            >
              Silence warning
            </button>
          </>
        )}
        <button class="btn btn-step" data-testid="debug-close" onClick={close}>
          Close
        </button>
      </div>
    </Modal>
  );
}

const COLUMNS: { reason: DebugReason; label: string; key: keyof Pick<LayerReport, 'nan' | 'inf' | 'underflow' | 'overflow'> }[] = [
  { reason: 'nan', label: 'NaN', key: 'nan' },
  { reason: 'inf', label: '±Inf', key: 'inf' },
  { reason: 'underflow', label: 'subnormal', key: 'underflow' },
  { reason: 'overflow', label: 'overflow', key: 'overflow' },
];

// "—" for none, "<0.1%" for a trace, else one decimal.
export function percent(fraction: number): string {
  if (!(fraction > 0)) return '—';
  if (fraction < 0.001) return '<0.1%';
  return `${(fraction * 100).toFixed(1)}%`;
}

const SOURCE_TEXT: Record<string, string> = {
  activation: 'activation',
  activation_gradient: 'gradient',
  weight_gradient: 'weight grad',
};

const FOLDED_TITLE =
  "A shape op, folded into the diagram's edges: turn on \"Shape ops\" in the Architecture pane to show its card";

function DebugDetails({ error, summary }: { error: DebugError; summary: DebugErrorSummary }) {
  const marks = useSelector(store, debugMarks);
  const visible = useSelector(store, visibleNames);
  const architecture = useSelector(store, (s) => s.architecture);
  // A shape op folded out of the diagram has no card to show.
  const folded = (layer: string) => !visible.has(layer) && (architecture?.layers.some((l) => l.name === layer) ?? false);
  // The pushed summary is newer than the fetched report.
  const update = summary.update === undefined ? error.update : summary.update;
  const done = updateDoneText(update);
  const columns = COLUMNS.filter((c) =>
    c.reason === 'nan' || c.reason === 'inf' ? error.checks_used.includes('nan_inf') : error.checks_used.includes('under_over'),
  );
  const show = (layer: string) => {
    const { shown } = store.get();
    if (!shown.includes(layer)) store.set({ shown: [...shown, layer] });
    store.set({ debugDialogOpen: false });
    requestFocus(layer, 'both');
  };
  return (
    <div class="debug-details">
      <p class="form-note">
        A check on this batch's activations or gradients found values that corrupt training, and the run paused on it.{' '}
        {update === 'applied'
          ? "The loop has since resumed, and its optimizer step used this batch's gradients."
          : update === 'skipped'
            ? 'The loop has since resumed with the gradients cleared: this batch changed no weight.'
            : 'When gradients were hit it paused before the optimizer applied them: the weights still hold their values from before the batch.'}
      </p>
      <p class="debug-reasons" data-testid="debug-reasons">
        Reasons: <b>{error.reason_labels.join(', ')}</b> · <span class="mono">{error.position.text}</span>
        {error.hits > 1 && <span class="muted"> · {error.hits} checked batches tripped since</span>}
        {done && (
          <>
            {' · '}
            <span data-testid="debug-update-done">{done}</span>
          </>
        )}
      </p>
      {update === 'held' && <UpdateChoice skip={summary.skip_update === true} refused={summary.skip_refused ?? null} testid="debug-update" />}
      {error.rerun && <RerunNote />}
      {error.root_cause && <RootCauseView error={error} />}
      <UncheckedList />
      <LossScaleNote />
      {error.checks_used.includes('under_over') && error.bands.length > 0 && <Bands bands={error.bands} />}
      <div class="debug-table-wrap">
        <table class="debug-table" data-testid="debug-table">
          <thead>
            <tr>
              <th>Layer</th>
              {columns.map((c) => (
                <th key={c.reason} class="num">
                  {c.label}
                </th>
              ))}
              <th>Where</th>
              <th>dtype</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {error.layers.map((row) => {
              const mark = marks.marks.get(row.layer);
              return (
                <tr key={row.layer} class={mark ? `mark-${mark}` : ''} data-testid={`debug-row-${row.layer}`} title={mark ? MARK_TEXT[mark] : undefined}>
                  <td class="mono">{row.layer}</td>
                  {columns.map((c) => (
                    <td key={c.reason} class="num mono">
                      {percent(row[c.key])}
                    </td>
                  ))}
                  <td class="muted">{row.sources.map((s) => SOURCE_TEXT[s] ?? s).join(', ')}</td>
                  <td class="muted mono">{row.dtype ?? '—'}</td>
                  <td>
                    <button
                      class="chip-button"
                      data-testid={`debug-show-${row.layer}`}
                      disabled={folded(row.layer)}
                      title={folded(row.layer) ? FOLDED_TITLE : undefined}
                      onClick={() => show(row.layer)}
                    >
                      Show
                    </button>
                  </td>
                </tr>
              );
            })}
            {error.layers.length === 0 && (
              <tr>
                <td colSpan={columns.length + 4} class="muted">
                  No layer holds the values any more (another category was silenced).
                </td>
              </tr>
            )}
          </tbody>
        </table>
      </div>
      {error.capsule && <CapsuleView path={error.capsule} />}
    </div>
  );
}

// The batch went through the loop body twice: say what that did and did not repeat.
function RerunNote() {
  const rerun = useSelector(store, (s) => s.debugReport?.rerun ?? null);
  return (
    <div class="form-note" data-testid="debug-rerun">
      This batch tripped untraced, so it ran again from the recorded state, traced, to name the producer
      {rerun ? `: ${rerun.ran_twice}.` : '.'}
      {rerun && (
        <>
          {' '}
          Restored before the second run: {rerun.restored.join('; ')}. Seen twice: {rerun.seen_twice.join('; ')}.{' '}
          {rerun.detect}.
        </>
      )}
    </div>
  );
}

// Mixed precision: the loss scaler's own overflows (skipped steps, not
// errors) and, for a collapsing scale, how it collapsed.
function LossScaleNote() {
  const scale = useSelector(store, (s) => s.debugReport?.loss_scale ?? null);
  const collapse = useSelector(store, (s) => s.debugReport?.error?.loss_scale ?? null);
  if (!scale?.in_use) return null;
  return (
    <p class="form-note" data-testid="debug-loss-scale">
      {collapse && (
        <>
          <b>The loss scale collapsed</b>: {collapse}.{' '}
        </>
      )}
      Loss scaler: {scale.skipped_steps} step{scale.skipped_steps === 1 ? '' : 's'} skipped for an overflow of the
      scaled gradients (the scaler's own, not errors)
      {scale.skips_in_row > 0 && <>, {scale.skips_in_row} in a row</>}; scale {scale.scale ?? '?'}. A collapse is{' '}
      {scale.collapse_skips} in a row or a scale below {scale.floor}.
    </p>
  );
}

// Tensors whose check failed: off for them, every other tensor checked.
function UncheckedList() {
  const unchecked = useSelector(store, (s) => s.debugReport?.unchecked_tensors ?? []);
  if (unchecked.length === 0) return null;
  return (
    <div class="form-note" data-testid="debug-unchecked">
      Checks turned off for a tensor they could not read (every other tensor stays checked):
      <ul>
        {unchecked.map((u) => (
          <li key={`${u.source}:${u.tensor}`} class="mono">
            {u.source.replace('_', ' ')} of {u.tensor}: {u.checks.join(', ')} off since {u.position.text} — {u.error}
          </li>
        ))}
      </ul>
    </div>
  );
}

function RootCauseView({ error }: { error: DebugError }) {
  const cause = error.root_cause!;
  const p = cause.producer;
  const shownPropagators = cause.propagators;
  return (
    <section class="debug-section" data-testid="debug-root-cause">
      <h3>Root cause</h3>
      <p class="debug-summary">{cause.summary}</p>
      {p && (
        <div class="debug-producer" data-testid="debug-producer">
          <div class="debug-op">
            <span class="debug-tag tag-producer">{cause.status === 'from_outside' ? 'first seen by' : 'producer'}</span>
            <b class="mono">{p.op}</b>
            {p.backward_node && (
              <span class="muted mono">
                {' '}
                ({p.backward_node}, the gradient of {p.forward_op ?? 'a forward op'})
              </span>
            )}
            <span class="muted">
              {' '}
              in the {p.pass} pass, {p.layer ? <span class="mono">{p.layer}</span> : "outside the model's layers (the loss?)"} ·
              op #{p.index}
            </span>
          </div>
          <TensorList label={cause.status === 'found' ? 'inputs (all finite)' : 'inputs'} tensors={p.inputs} />
          <TensorList label="outputs" tensors={p.outputs} />
        </div>
      )}
      {shownPropagators.length > 0 && (
        <details class="debug-propagators" data-testid="debug-propagators">
          <summary>
            {cause.propagator_count} later op{cause.propagator_count === 1 ? '' : 's'} only passed non-finite values on (not
            the cause)
          </summary>
          <ul>
            {shownPropagators.map((op) => (
              <PropagatorItem key={op.index} op={op} />
            ))}
            {cause.propagator_count > shownPropagators.length && (
              <li class="muted">… and {cause.propagator_count - shownPropagators.length} more</li>
            )}
          </ul>
        </details>
      )}
    </section>
  );
}

function PropagatorItem({ op }: { op: OpReport }) {
  const out = op.outputs[0];
  return (
    <li>
      <span class="debug-tag tag-propagator">passed on</span> <span class="mono">{op.op}</span>
      <span class="muted">
        {' '}
        {op.pass}
        {op.backward_node ? ` (${op.backward_node})` : ''} · {op.layer ?? 'outside the layers'} · #{op.index}
        {out ? ` → ${statsText(out)}` : ''}
      </span>
    </li>
  );
}

function statsText(t: TensorStats): string {
  const bad: string[] = [];
  if (t.nan) bad.push(`${t.nan} NaN`);
  if (t.pos_inf) bad.push(`${t.pos_inf} +Inf`);
  if (t.neg_inf) bad.push(`${t.neg_inf} −Inf`);
  const range = t.min != null && t.max != null ? `finite range [${formatNum(t.min)}, ${formatNum(t.max)}]` : 'no finite values';
  return `${t.dtype} ${shapeText(t.shape)} ${range}${bad.length ? ` · ${bad.join(', ')}` : ''}`;
}

function TensorList({ label, tensors }: { label: string; tensors: TensorStats[] }) {
  if (!tensors.length) return null;
  return (
    <div class="debug-tensors">
      <span class="muted">{label}</span>
      <ul>
        {tensors.map((t, i) => (
          <li key={i} class="mono">
            {statsText(t)}
          </li>
        ))}
      </ul>
    </div>
  );
}

// "6.10e-05", "2.13e+37": two-digit exponents, as finfo prints them.
function sci(x: number): string {
  return x.toExponential(2).replace(/e([+-])(\d)$/, 'e$10$2');
}

function Bands({ bands }: { bands: DebugBand[] }) {
  const half = bands.some((b) => b.dtype === 'float16');
  return (
    <section class="debug-bands" data-testid="debug-bands">
      {bands.map((b) => (
        <div key={b.dtype} class="mono">
          {b.dtype}: subnormal when 0 &lt; |grad| &lt; {sci(b.tiny)}; overflow when |grad| ≥ {sci(b.overflow)}
        </div>
      ))}
      <p class="debug-tip">
        {half
          ? 'float16 gradients: scale the loss (multiply it by S before backward(), divide the gradients by S before the step) or train in bfloat16, which has float32\'s range. '
          : ''}
        Vanishing gradients: check the initialisation and normalisation. Exploding ones: lower the learning rate or clip
        with torch::nn::utils::clip_grad_norm_.
      </p>
    </section>
  );
}

function CapsuleView({ path }: { path: string }) {
  const copy = () =>
    navigator.clipboard?.writeText(path).then(
      () => toast('Capsule path copied', 'info'),
      () => toast('The browser refused the clipboard'),
    );
  return (
    <section class="debug-section" data-testid="debug-capsule">
      <h3>Replay it</h3>
      <p>
        The batch, pre-step weights, buffers, optimizer state and RNG states are in the NaN capsule{' '}
        <span class="mono debug-path" data-testid="debug-capsule-path">
          {path}
        </span>{' '}
        <button class="chip-button" onClick={copy}>
          Copy
        </button>
      </p>
      <p class="muted">
        In your program: <code>auto capsule = nansense::replay_capsule("{path}", model, &amp;optimizer);</code> then run the
        batch body once on <code>capsule.batch</code> — on the CPU it reproduces the values bit for bit. The Fashion-MNIST
        demo does this with <code>--replay {path}</code> and the flags of the run that wrote it.
      </p>
    </section>
  );
}
