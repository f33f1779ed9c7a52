// The Stats page's choices: view, phase (with "Current batch" for the
// histograms and the Min/Max galleries), layer (in graph order, "All watched
// layers" while few carry statistics) and how the axes are drawn.
import type { PatchGrid } from '../api/types';
import { pageHref } from '../links';
import { store } from '../state/app';
import { ALL_LAYERS, choose, offersAll, phasesOf, statsLayers, statsStore, type StatsView } from '../state/stats';
import { useFields, useSelector } from '../state/store';
import { phaseColor } from './colors';

const VIEW_TITLE: Record<StatsView, string> = { histogram: 'Histogram', minmax: 'Min/Max', graphs: 'Graphs' };

const GRIDS: { value: PatchGrid; label: string; title: string }[] = [
  { value: 'max_pixel', label: 'Max pixel', title: 'Input crops around where each channel was highest' },
  { value: 'min_pixel', label: 'Min pixel', title: 'Input crops around where each channel was lowest' },
  { value: 'max_average', label: 'Max average', title: "Whole inputs with the highest channel mean" },
  { value: 'min_average', label: 'Min average', title: "Whole inputs with the lowest channel mean" },
];

export function Sidebar({ layers, phase }: { layers: string[]; phase: string | null }) {
  const s = useFields(statsStore, 'view', 'layer', 'list', 'grid', 'heatmap', 'grids', 'logX', 'logY', 'retain');
  const architecture = useSelector(store, (x) => x.architecture);
  const withStats = statsLayers(s.list);
  const phases = phasesOf(s.list, withStats);
  const current = phase === null;
  // The current batch has every captured layer; the rest only those with statistics.
  const pickable = current && s.view !== 'graphs' ? (architecture?.layers.map((l) => l.name) ?? withStats) : withStats;
  const selected = s.layer === ALL_LAYERS && offersAll(s.list) ? ALL_LAYERS : (layers[0] ?? '');
  const options = selected && selected !== ALL_LAYERS && !pickable.includes(selected) ? [selected, ...pickable] : pickable;

  return (
    <aside class="stats-sidebar" data-testid="stats-sidebar">
      <h1 class="stats-heading">
        Stats <span class="muted">{withStats.length} layer{withStats.length === 1 ? '' : 's'}</span>
      </h1>

      <fieldset class="side-group" data-tour="stats-view">
        <legend>View</legend>
        {(['histogram', 'minmax', 'graphs'] as StatsView[]).map((v) => (
          <label class="radio-row" key={v}>
            <input type="radio" name="view" data-testid={`view-${v}`} checked={s.view === v} onChange={() => choose({ view: v })} />
            {VIEW_TITLE[v]}
          </label>
        ))}
      </fieldset>

      <fieldset class="side-group" data-tour="stats-phase">
        <legend>Phase</legend>
        {phases.length === 0 && s.view === 'graphs' && <p class="form-hint">No phase has statistics yet.</p>}
        {phases.map((p) => (
          <label class="radio-row" key={p}>
            <input type="radio" name="phase" data-testid={`phase-${p}`} checked={phase === p} onChange={() => choose({ phase: p })} />
            <i class="phase-swatch" style={{ background: phaseColor(p, phases) }} />
            {p}
          </label>
        ))}
        {s.view !== 'graphs' && (
          <>
            {phases.length > 0 && <hr class="side-divider" />}
            <label
              class="radio-row"
              title={s.view === 'minmax' ? "The last captured batch's own extremes, for any layer" : 'The last captured batch, for any layer'}
            >
              <input type="radio" name="phase" data-testid="phase-current" checked={current} onChange={() => choose({ phase: null })} />
              Current batch
            </label>
          </>
        )}
      </fieldset>

      <fieldset class="side-group" data-tour="stats-layer">
        <legend>Layer</legend>
        <select
          class="side-select mono"
          data-testid="layer-picker"
          value={selected}
          onChange={(e) => choose({ layer: e.currentTarget.value })}
          disabled={options.length === 0}
        >
          {offersAll(s.list) && <option value={ALL_LAYERS}>All watched layers</option>}
          {options.map((l) => (
            <option key={l} value={l}>
              {l}
            </option>
          ))}
        </select>
      </fieldset>

      {s.view === 'minmax' && (
        <fieldset class="side-group" data-testid="gallery-group">
          <legend>Gallery</legend>
          {GRIDS.filter((g) => s.grids.includes(g.value) || g.value === s.grid).map((g) => (
            <label class="radio-row" key={g.value} title={g.title}>
              <input type="radio" name="grid" data-testid={`grid-${g.value}`} checked={s.grid === g.value} onChange={() => statsStore.set({ grid: g.value })} />
              {g.label}
            </label>
          ))}
          <Check id="heatmap" label="Enable heatmap" checked={s.heatmap} title="The channel's activation over each input: red positive, blue negative" onChange={(v) => statsStore.set({ heatmap: v })} />
          <a class="btn btn-quiet side-link" href={pageHref('experiment', { layer: layers[0] ?? '' })} data-testid="compare-dream">
            Compare with Deep Dream
          </a>
        </fieldset>
      )}

      {s.view !== 'minmax' && (
      <fieldset class="side-group" data-tour="stats-axes">
        <legend>Axes</legend>
        {s.view === 'histogram' && (
          <Check id="log-x" label="Log x" checked={s.logX} title="Signed log by bin (powers of ten evenly spaced); off: a linear value axis" onChange={(v) => statsStore.set({ logX: v })} />
        )}
        <Check id="log-y" label="Log y" checked={s.logY} title={s.view === 'histogram' ? 'Log count axis' : 'Symmetric log value axis'} onChange={(v) => statsStore.set({ logY: v })} />
        <Check id="retain-axes" label="Retain axes" checked={s.retain} title="Keep the current ranges instead of fitting each update" onChange={(v) => statsStore.set({ retain: v })} />
        {s.view === 'histogram' && <BandCheck />}
      </fieldset>
      )}

      <a class="btn btn-quiet side-back" href={pageHref('main')} data-testid="stats-back">
        ← Back to the layers
      </a>
    </aside>
  );
}

function Check(props: { id: string; label: string; checked: boolean; title: string; onChange(v: boolean): void }) {
  return (
    <label class="switch-row" title={props.title}>
      <input type="checkbox" data-testid={props.id} checked={props.checked} onChange={(e) => props.onChange(e.currentTarget.checked)} />
      {props.label}
    </label>
  );
}

// Pre-checked while the under/overflow check has tripped.
function BandCheck() {
  const band = useSelector(statsStore, (s) => s.band);
  const tripped = useSelector(store, bandTripped);
  return (
    <Check
      id="show-band"
      label="Show subnormal/overflow"
      checked={band ?? tripped}
      title="The dtype's subnormal (±finfo.tiny) and overflow (±finfo.max/16) edges, where they fall inside 1e-9..1e6"
      onChange={(v) => statsStore.set({ band: v })}
    />
  );
}

export function bandTripped(s: ReturnType<typeof store.get>): boolean {
  return s.status?.debug?.error?.reasons.some((r) => r === 'underflow' || r === 'overflow') ?? false;
}
