// A shown layer: header, then its activation and gradient strips. Labels sit
// in a fixed column; both pictures share one horizontal scroller so their
// channels line up (rows aligned by CSS subgrid, no sticky positioning).
import { memo } from 'preact/compat';
import { useContext, useEffect, useRef, useState } from 'preact/hooks';
import type { Layer, SnapshotLayer, StripKind, TensorStats } from '../api/types';
import { formatNum } from '../format';
import { FIXED_BY_RECORDING, hideLayer, mainRecording, requestFocus, sampleExists, setHovered, snapshotLayer, store } from '../state/app';
import { debugMarkOf, MARK_TEXT } from '../state/debug';
import { isWatched } from '../state/stats';
import { useSelector } from '../state/store';
import { WatchEye } from '../stats/WatchEye';
import { CardLinks } from './CardLinks';
import { InstrumentCell, InstrumentLabel } from './InstrumentStrip';
import { shapeText, stripGeometry } from './geometry';
import { StripLabel, StripView } from './StripParts';
import { useStrip } from './useStrip';
import { VisibilityContext } from './visibility';

const ABSENT: Record<StripKind, string> = {
  activation: 'No activation was captured for this layer in this batch.',
  gradient: 'No gradient: no backward pass ran through this layer in this batch (e.g. an evaluation phase).',
};
const INPUT_GRADIENT = 'No gradient: the batch input does not require one.';
// While a probe's result is shown (pin, forward mode, perturbations).
const PROBE_ABSENT: Record<StripKind, string> = {
  activation: "This layer did not run in the probe's forward.",
  gradient: 'No gradients on probe runs: a probe runs the forward only.',
};
const UNDRAWABLE = 'This tensor has no picture: only [C,H,W], [F], [T,D] and scalars are drawn.';

// Hover follows the pointer's own moves. Scrolling slides cards under a
// still pointer and the browser reports that as movement of zero: taking
// those as hovers would restyle the diagram on every frame of a scroll.
function hoverByPointer(e: PointerEvent): void {
  if (e.movementX === 0 && e.movementY === 0) return;
  const layer = (e.currentTarget as HTMLElement).dataset.layer;
  if (layer) setHovered(layer);
}

export const LayerCard = memo(function LayerCard({ layer }: { layer: Layer }) {
  const name = layer.name;
  const visibility = useContext(VisibilityContext);
  const body = useRef<HTMLDivElement>(null);
  const [visible, setVisible] = useState(false);
  const generation = useSelector(store, (s) => s.generation);
  const sequence = useSelector(store, (s) => s.sequence);
  const snapshotSequence = useSelector(store, (s) => s.snapshot?.sequence ?? -1);
  const entry = useSelector(store, (s) => snapshotLayer(s.snapshot, name));
  const sample = useSelector(store, (s) => s.sample);
  const recording = useSelector(store, mainRecording);
  const sampleOk = useSelector(store, sampleExists);
  const average = useSelector(store, (s) => s.average);
  const values = useSelector(store, (s) => s.values);
  const hovered = useSelector(store, (s) => s.hovered === name);
  const mark = useSelector(store, (s) => debugMarkOf(s, name));
  const watched = useSelector(store, (s) => isWatched(s.status?.stats?.watched_layers, name));
  const probe = useSelector(store, (s) => s.snapshot?.probe ?? null);

  useEffect(() => {
    if (!body.current || !visibility) return;
    return visibility.observe(body.current, setVisible);
  }, [visibility]);

  const current = snapshotSequence === sequence;
  const activationShape = entry?.activation?.shape ?? layer.output_shape;

  const strip = (kind: StripKind) => {
    const summary = entry?.[kind] ?? null;
    const shape = summary?.shape ?? activationShape;
    const geometry = shape.length ? stripGeometry(shape, average, summary?.dtype ?? entry?.activation?.dtype) : null;
    const absent =
      current && !summary
        ? probe
          ? PROBE_ABSENT[kind]
          : layer.role === 'input' && kind === 'gradient'
            ? INPUT_GRADIENT
            : ABSENT[kind]
        : null;
    return { geometry, absent: absent ?? (geometry ? null : UNDRAWABLE) };
  };
  const a = strip('activation');
  const g = strip('gradient');
  const common = { layer: name, generation, sequence, sample, average, values, visible };
  const aState = useStrip({
    ...common,
    kind: 'activation',
    ready: sampleOk && canAsk('activation', entry, current),
    settledEmpty: a.absent != null,
  });
  const gState = useStrip({
    ...common,
    kind: 'gradient',
    ready: sampleOk && canAsk('gradient', entry, current),
    settledEmpty: g.absent != null,
  });
  const aMessage = a.absent ?? aState.error;
  const gMessage = g.absent ?? gState.error;
  // watch_layer_tensor outputs of the snapshot the page has: rows 3, 4, ...
  const instruments = current ? Object.keys(entry?.instruments ?? {}) : [];
  const rows = 2 + instruments.length;

  return (
    <section
      class={`card role-${layer.role} ${hovered ? 'hovered' : ''} ${mark ? `debug-${mark}` : ''}`}
      data-debug={mark ?? undefined}
      data-testid={`card-${name}`}
      data-tour="card"
      data-layer={name}
      onPointerMove={hoverByPointer}
      onPointerLeave={() => store.get().hovered === name && setHovered(null)}
    >
      <header class="card-header" onClick={() => requestFocus(name, 'graph')} title="Show this layer in the architecture">
        <span class="card-name mono">{name}</span>
        <span class={`kind-badge role-${layer.role}`}>{layer.kind}</span>
        <span class="card-shape mono">{shapeText(activationShape.slice(1))}</span>
        {mark && (
          <span class={`debug-badge debug-badge-${mark}`} data-testid={`debug-badge-${name}`} title={MARK_TEXT[mark]}>
            {mark === 'producer' ? 'produced here' : mark === 'entry' ? 'entered here' : mark === 'worst' ? 'worst band share' : 'passed on'}
          </span>
        )}
        {probe && current && (
          <span
            class="probe-badge"
            data-testid={`probe-badge-${name}`}
            title={`Probe run ${probe.run}: the batch of ${probe.position.text} re-run in ${probe.mode} mode${probe.diff ? '; the strips show perturbed − original' : ''}`}
          >
            {probe.diff ? 'probe Δ' : 'probe'}
          </span>
        )}
        <Stats summary={entry?.activation ?? null} />
        <CardLinks layer={layer} />
        <WatchEye layer={name} watched={watched} />
        <button
          class="icon-button card-hide"
          data-testid={`hide-${name}`}
          disabled={recording}
          title={recording ? FIXED_BY_RECORDING : 'Hide this card'}
          aria-label={`Hide ${name}`}
          onClick={(e) => {
            e.stopPropagation();
            hideLayer(name);
          }}
        >
          <EyeOff />
        </button>
      </header>
      <div class="card-body" ref={body} style={rows > 2 ? { gridTemplateRows: `repeat(${rows}, auto)` } : undefined}>
        <StripLabel kind="activation" state={aState} message={aMessage} />
        <StripLabel kind="gradient" state={gState} message={gMessage} />
        {instruments.map((n, i) => (
          <InstrumentLabel key={n} instrument={n} row={3 + i} />
        ))}
        <div class="strip-scroller" style={rows > 2 ? { gridRow: `1 / span ${rows}` } : undefined}>
          <StripView layer={name} kind="activation" geometry={a.geometry} state={aState} message={aMessage} sample={sample} />
          <StripView layer={name} kind="gradient" geometry={g.geometry} state={gState} message={gMessage} sample={sample} />
          {instruments.map((n, i) => (
            <InstrumentCell
              key={n}
              layer={name}
              instrument={n}
              row={3 + i}
              geometry={a.geometry}
              sequence={snapshotSequence}
              sample={sample}
              average={average}
              values={values}
              visible={visible && sampleOk}
            />
          ))}
        </div>
      </div>
    </section>
  );
});

// An activation is drawn from the snapshot the server holds even before this
// page has that snapshot's JSON (it is there for every captured layer); a
// gradient exists only on some batches, so it waits for the JSON to say so
// rather than provoke a 404.
function canAsk(kind: StripKind, entry: SnapshotLayer | null, current: boolean): boolean {
  if (!entry) return false;
  if (kind === 'activation') return entry.activation != null;
  return current && entry.gradient != null;
}

function Stats({ summary }: { summary: TensorStats | null }) {
  if (!summary) return <span class="card-stats" />;
  return (
    <span class="card-stats mono" title="Activation over the whole batch: min / mean / max">
      <span>min {formatNum(summary.min)}</span>
      <span>mean {formatNum(summary.mean)}</span>
      <span>max {formatNum(summary.max)}</span>
      {summary.n < summary.numel && (
        <span class="stat-bad">{summary.numel - summary.n} non-finite</span>
      )}
    </span>
  );
}

function EyeOff() {
  return (
    <svg viewBox="0 0 24 24" width="16" height="16" aria-hidden="true">
      <path
        fill="currentColor"
        d="M12 7a5 5 0 0 1 5 5c0 .65-.13 1.26-.36 1.83l2.92 2.92A11.8 11.8 0 0 0 22.99 12C21.26 7.61 17 4.5 12 4.5c-1.4 0-2.74.25-3.98.7l2.16 2.16C10.74 7.13 11.35 7 12 7zM2 4.27l2.28 2.28.46.46A11.8 11.8 0 0 0 1 12c1.73 4.39 6 7.5 11 7.5 1.55 0 3.03-.3 4.38-.84l.42.42L19.73 22 21 20.73 3.27 3 2 4.27zM7.53 9.8l1.55 1.55c-.05.21-.08.43-.08.65a3 3 0 0 0 3 3c.22 0 .44-.03.65-.08l1.55 1.55c-.67.33-1.41.53-2.2.53a5 5 0 0 1-5-5c0-.79.2-1.53.53-2.2zm4.31-.78 3.15 3.15.02-.16a3 3 0 0 0-3-3l-.17.01z"
      />
    </svg>
  );
}
