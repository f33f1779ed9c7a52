// The Weights page (/weights?layer=): one card per parameter of a layer, with
// its shape and a role per dimension (X / Y / Tile / Index with an index),
// and strips for the weight, its gradient, every tensor-valued optimizer
// state entry and each weight-tensor instrument's output; the tensors shaped
// like the parameter share its axis controls. A line below gives the scalar
// optimizer state (Adam's step) and the param group's live hyperparameters.
// The page follows the run: every new snapshot redraws it.
import { useEffect, useState } from 'preact/hooks';
import { Dialogs } from '../App';
import { ApiError, getWeightStats, pngUrl, renderWeightStrip, SnapshotReplaced } from '../api/client';
import type { Num, ParameterStats, TensorStats, WeightLayout, WeightStats, WeightStripInfo } from '../api/types';
import { formatNum } from '../format';
import { pageHref } from '../links';
import { FIXED_BY_RECORDING, store } from '../state/app';
import { useSelector } from '../state/store';
import { Banners } from '../topbar/Banners';
import { TopBar } from '../topbar/TopBar';
import { ROLE_LABEL, roleOf, rolesFor, sameShape, withIndex, withRole, type Role } from './layout';

const NO_GRADIENT =
  'no gradient yet: none before the first backward, in an evaluation phase, or after zero_grad(set_to_none)';

export function WeightsPage() {
  const [layer, setLayer] = useState(() => new URLSearchParams(location.search).get('layer') ?? '');
  const sequence = useSelector(store, (s) => s.sequence);
  const known = useSelector(store, (s) => s.architecture?.captured === true);
  // start_recording draws this layer's tensors in their default layout.
  const recording = useSelector(store, (s) => layer !== '' && (s.status?.recordings.includes(`weights:${layer}`) ?? false));
  // Joined, so that an unchanged list does not re-render the page.
  const withParameters = useSelector(store, (s) =>
    (s.architecture?.layers ?? [])
      .filter((l) => l.parameters.length > 0)
      .map((l) => l.name)
      .join('\n'),
  )
    .split('\n')
    .filter(Boolean);
  const [stats, setStats] = useState<WeightStats | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!layer || sequence === 0) return;
    const abort = new AbortController();
    getWeightStats(layer, abort.signal)
      .then((s) => {
        setStats(s);
        setError(null);
      })
      .catch((e: unknown) => {
        if (abort.signal.aborted) return;
        setStats(null);
        setError(e instanceof Error ? e.message : String(e));
      });
    return () => abort.abort();
  }, [layer, sequence]);

  const choose = (name: string) => {
    setLayer(name);
    setStats(null);
    history.replaceState(null, '', pageHref('weights', { layer: name }));
  };

  // Opened without ?layer= (the top bar's link, a bookmark): the first layer
  // that has weights, as soon as the architecture names it.
  const firstWithParameters = withParameters[0] ?? '';
  useEffect(() => {
    if (!layer && firstWithParameters) choose(firstWithParameters);
  }, [layer, firstWithParameters]);

  return (
    <div class="app weights-app">
      <TopBar page="weights" />
      <Banners />
      <main class="weights-main" data-testid="weights-main" data-sequence={stats?.sequence ?? 0}>
        <div class="weights-head">
          <h1 class="stats-heading" data-testid="weights-title">
            Weights · {layer || '(no layer)'}
          </h1>
          <label class="weights-layer" data-tour="weights-layer">
            <span>Layer</span>
            <select
              data-testid="weights-layer"
              value={layer}
              onChange={(e) => choose((e.target as HTMLSelectElement).value)}
            >
              {!withParameters.includes(layer) && <option value={layer}>{layer || 'choose a layer'}</option>}
              {withParameters.map((name) => (
                <option key={name} value={name}>
                  {name}
                </option>
              ))}
            </select>
          </label>
          {stats && <span class="weights-position mono">{positionText(stats)}</span>}
          {layer && (
            <a
              class="btn btn-quiet"
              data-testid="weight-graphs-link"
              data-tour="weight-graphs"
              href={pageHref('stats', { layer, view: 'graphs' })}
              title="This layer's weights over the epochs (the Stats page's graphs)"
            >
              Weight graphs
            </a>
          )}
        </div>
        {!layer && (
          <div class="empty-hint" data-testid="weights-empty">
            {known ? 'No layer of this model has parameters.' : 'Waiting for the first captured batch…'}
          </div>
        )}
        {layer && sequence === 0 && <div class="empty-hint">Waiting for the first captured batch…</div>}
        {error && (
          <div class="empty-hint weights-error" data-testid="weights-error">
            {error}
          </div>
        )}
        {recording && (
          <div class="hint-amber" data-testid="weights-fixed">
            This view records: its frames draw each tensor the default way, so the axis controls are held there until the
            recording is saved or deleted (Settings → Recording).
          </div>
        )}
        {stats?.parameters.map((p) => (
          <ParameterCard
            key={`${layer}|${p.name}`}
            layer={stats.layer}
            parameter={p}
            sequence={stats.sequence}
            recording={recording}
          />
        ))}
      </main>
      <Dialogs />
    </div>
  );
}

const positionText = (s: WeightStats) => s.position.text;

interface StripSpec {
  tensor: string; // the server's name: weight, gradient, state:<key>, instrument:<name>
  label: string;
  tone: 'weight' | 'gradient' | 'state' | 'instrument';
  shape: number[] | null; // null: nothing to draw (message says why)
  message?: string;
}

function stripsOf(p: ParameterStats): StripSpec[] {
  const out: StripSpec[] = [{ tensor: 'weight', label: 'WEIGHT', tone: 'weight', shape: p.value?.shape ?? null }];
  out.push(
    p.gradient
      ? { tensor: 'gradient', label: 'GRADIENT', tone: 'gradient', shape: p.gradient.shape }
      : { tensor: 'gradient', label: 'GRADIENT', tone: 'gradient', shape: null, message: NO_GRADIENT },
  );
  for (const [key, v] of Object.entries(p.optimizer_state ?? {})) {
    if (isTensor(v)) out.push({ tensor: `state:${key}`, label: key, tone: 'state', shape: v.shape });
  }
  for (const [name, v] of Object.entries(p.instruments ?? {})) {
    out.push({ tensor: `instrument:${name}`, label: name, tone: 'instrument', shape: v.shape });
  }
  return out;
}

const isTensor = (v: Num | TensorStats): v is TensorStats => typeof v === 'object' && v !== null;

function ParameterCard(props: { layer: string; parameter: ParameterStats; sequence: number; recording: boolean }) {
  const { layer, parameter: p, sequence, recording } = props;
  const shape = p.value?.shape ?? [];
  const fallback: WeightLayout = { x_dim: null, y_dim: null, tile_dim: null, index: shape.map(() => 0) };
  const [chosen, setLayout] = useState<WeightLayout>(p.default_layout ?? fallback);
  // While the view records, the page shows what the video draws; the user's
  // choice comes back after.
  const layout = recording ? (p.default_layout ?? fallback) : chosen;
  const shapeKey = shape.join('x');
  // A parameter that changed shape (another model after a restart) starts over.
  useEffect(() => setLayout(p.default_layout ?? fallback), [shapeKey]);

  const scalars = Object.entries(p.optimizer_state ?? {}).filter(([, v]) => !isTensor(v)) as [string, Num][];
  const hyper = Object.entries(p.hyperparameters ?? {});
  const roles = rolesFor(shape.length);
  return (
    <section class="card weights-card" data-testid={`weights-card-${p.name}`}>
      <header class="card-header weights-card-header">
        <span class="card-name mono">{p.name}</span>
        <span class="card-shape mono" data-testid={`weights-shape-${p.name}`}>
          shape ({shape.join(', ')})
        </span>
        {p.value && (
          <span class="card-stats mono" title="The weight: min / mean / max">
            <span>min {formatNum(p.value.min)}</span>
            <span>mean {formatNum(p.value.mean)}</span>
            <span>max {formatNum(p.value.max)}</span>
          </span>
        )}
      </header>
      {shape.length > 0 && (
        <div class="weights-dims" data-tour="weights-dims">
          {shape.map((size, d) => {
            const role = roleOf(layout, d);
            return (
              <div class="weights-dim" key={d}>
                <span class="mono">
                  dim {d} · {size}
                </span>
                <select
                  data-testid={`weights-role-${p.name}-${d}`}
                  value={role}
                  disabled={recording}
                  title={recording ? FIXED_BY_RECORDING : 'X: across a tile · Y: down a tile · Tile: one tile per index · Index: held at one index'}
                  onChange={(e) => setLayout(withRole(layout, d, (e.target as HTMLSelectElement).value as Role))}
                >
                  {roles.map((r) => (
                    <option key={r} value={r}>
                      {ROLE_LABEL[r]}
                    </option>
                  ))}
                </select>
                {role === 'index' && (
                  <input
                    type="number"
                    data-testid={`weights-index-${p.name}-${d}`}
                    min={0}
                    max={size - 1}
                    disabled={recording}
                    value={layout.index[d] ?? 0}
                    aria-label={`Index of dim ${d}`}
                    onInput={(e) => {
                      const v = Number((e.target as HTMLInputElement).value);
                      if (Number.isInteger(v) && v >= 0 && v < size) setLayout(withIndex(layout, d, v));
                    }}
                  />
                )}
              </div>
            );
          })}
        </div>
      )}
      <div class="weights-strips" data-tour="weights-strips">
        {stripsOf(p).map((s) => (
          <WeightStrip
            key={s.tensor}
            layer={layer}
            parameter={p.name}
            spec={s}
            // Tensors shaped like the parameter share its axis controls; the
            // others keep the server's default for their own shape.
            layout={s.shape && sameShape(s.shape, shape) ? layout : null}
            sequence={sequence}
          />
        ))}
      </div>
      <div class="weights-scalars mono" data-testid={`weights-scalars-${p.name}`} data-tour="weights-scalars">
        {scalars.map(([k, v]) => (
          <span key={k}>
            {k} {formatNum(v)}
          </span>
        ))}
        {hyper.map(([k, v]) => (
          <span key={k}>
            {k} {formatNum(v)}
          </span>
        ))}
        {scalars.length + hyper.length === 0 && <span>{p.optimizer_state_note ?? 'no optimizer state'}</span>}
      </div>
    </section>
  );
}

// The resolved layout as the server drew it, for tests and tooltips:
// "x3 y2 tile1 index0,0,0,0" (a role no dimension holds is "-").
function layoutText(l: WeightLayout): string {
  const d = (n: number | null) => (n === null ? '-' : String(n));
  return `x${d(l.x_dim)} y${d(l.y_dim)} tile${d(l.tile_dim)} index${l.index.join(',')}`;
}

interface Drawn {
  url: string;
  info: WeightStripInfo;
}

// Small kernels get big pixels; a wide matrix stays readable by scrolling.
function scaleFor(info: WeightStripInfo): number {
  return Math.max(1, Math.min(16, Math.floor(96 / Math.max(info.tile_height, 1))));
}

function WeightStrip(props: {
  layer: string;
  parameter: string;
  spec: StripSpec;
  layout: WeightLayout | null;
  sequence: number;
}) {
  const { layer, parameter, spec, layout, sequence } = props;
  const [drawn, setDrawn] = useState<Drawn | null>(null);
  const [error, setError] = useState<string | null>(null);
  const layoutKey = JSON.stringify(layout);
  useEffect(() => {
    if (!spec.shape) return;
    const abort = new AbortController();
    renderWeightStrip(layer, parameter, spec.tensor, layout, sequence, abort.signal)
      .then((r) => {
        setDrawn({ url: pngUrl(r.png), info: r.info });
        setError(null);
      })
      .catch((e: unknown) => {
        // A newer snapshot is on its way; keep the picture until it arrives.
        if (abort.signal.aborted || e instanceof SnapshotReplaced) return;
        setError(e instanceof ApiError || e instanceof Error ? e.message : String(e));
      });
    return () => abort.abort();
  }, [layer, parameter, spec.tensor, spec.shape?.join('x'), layoutKey, sequence]);

  const id = `weights-strip-${parameter}-${spec.tensor}`;
  const message = spec.message ?? error;
  return (
    <div class={`weights-strip weights-${spec.tone}`}>
      <div class="strip-label">
        <span class="strip-marker">{spec.label}</span>
        {drawn && !message && <span class="weights-legend mono">±{formatNum(drawn.info.scale_max)}</span>}
      </div>
      <div class="weights-picture">
        {message ? (
          <div class="strip-absent" data-testid={id} data-state="absent">
            {message}
          </div>
        ) : drawn ? (
          <img
            data-testid={id}
            data-state="drawn"
            data-sequence={drawn.info.sequence}
            data-tiles={drawn.info.tiles}
            data-tile-width={drawn.info.tile_width}
            data-tile-height={drawn.info.tile_height}
            data-layout={layoutText(drawn.info.layout)}
            src={drawn.url}
            width={drawn.info.width * scaleFor(drawn.info)}
            height={drawn.info.height * scaleFor(drawn.info)}
            alt={`${spec.label} of ${parameter}`}
          />
        ) : (
          <div class="strip-absent" data-state="loading">
            drawing…
          </div>
        )}
      </div>
    </div>
  );
}
