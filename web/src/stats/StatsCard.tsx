// One layer on the Stats page. Histogram: a table per phase, the activation
// and gradient histograms over the signed-log bins (per channel on a switch)
// and the distribution across epochs. Graphs: per-epoch lines of the
// statistics and the layer's parameters.
import { useMemo, useState } from 'preact/hooks';
import type { CurrentStats, EpochStats, TensorStatsSnapshot, StatsHistory } from '../api/types';
import { formatCount, formatNum } from '../format';
import { pageHref } from '../links';
import { store } from '../state/app';
import { isWatched, statsStore } from '../state/stats';
import { useFields, useSelector } from '../state/store';
import { BinSamples, type BinTarget } from './BinSamples';
import { bandEdges, hasBands } from './bins';
import { PatchGalleryBody } from './PatchGallery';
import { Chart } from './Chart';
import { CURRENT_COLOR, phaseColor } from './colors';
import { bandTripped } from './Sidebar';
import { WatchEye } from './WatchEye';
import { clippedText, distributionSpec, histogramSpec, KIND_TITLE, linesSpec, parameterSpec, type HistogramRow, type Kind } from './specs';

const KINDS: Kind[] = ['activation', 'gradient'];

export function StatsCard({ layer, phase }: { layer: string; phase: string | null }) {
  const view = useSelector(statsStore, (s) => s.view);
  const history = useSelector(statsStore, (s) => s.histories[layer] ?? null);
  const current = useSelector(statsStore, (s) => (phase === null ? (s.current[layer] ?? null) : null));
  const currentError = useSelector(statsStore, (s) => s.currentErrors[layer] ?? null);
  const watched = useSelector(store, (s) => isWatched(s.status?.stats?.watched_layers, layer));
  const kind = useSelector(store, (s) => s.architecture?.layers.find((l) => l.name === layer)?.kind ?? '');

  return (
    <section class="card stats-card" data-testid={`stats-card-${layer}`} data-layer={layer}>
      <header class="card-header stats-card-header">
        <span class="card-name mono">{layer}</span>
        {kind && <span class="kind-badge">{kind}</span>}
        <span class="toolbar-spacer" />
        <a class="chip-button" href={pageHref('main')} title="Back to the main page">
          Layers
        </a>
        <WatchEye layer={layer} watched={watched} />
      </header>
      <div class="stats-card-body">
        {view === 'histogram' && (
          <HistogramBody layer={layer} phase={phase} history={history} current={current} currentError={currentError} />
        )}
        {view === 'minmax' && <PatchGalleryBody layer={layer} phase={phase} />}
        {view === 'graphs' && <GraphsBody layer={layer} phase={phase} history={history} />}
      </div>
    </section>
  );
}

// The newest epoch of each phase (the one that keeps its bins).
function newest(history: StatsHistory | null): { phase: string; bucket: EpochStats }[] {
  if (!history) return [];
  return Object.entries(history.phases).flatMap(([phase, buckets]) => {
    const bucket = buckets[buckets.length - 1];
    return bucket ? [{ phase, bucket }] : [];
  });
}

interface Column {
  label: string;
  color: string;
  activation: TensorStatsSnapshot | null;
  gradient: TensorStatsSnapshot | null;
}

function HistogramBody(props: {
  layer: string;
  phase: string | null;
  history: StatsHistory | null;
  current: CurrentStats | null;
  currentError: string | null;
}) {
  const { layer, phase, history, current, currentError } = props;
  const s = useFields(statsStore, 'list', 'logX', 'logY', 'retain', 'band');
  const edges = s.list?.edges ?? history?.edges ?? null;
  const dtype = useSelector(store, (x) => x.architecture?.layers.find((l) => l.name === layer)?.dtype ?? null);
  const reportBands = useSelector(store, (x) => x.debugReport?.error?.bands ?? null);
  const tripped = useSelector(store, bandTripped);
  const [perChannel, setPerChannel] = useState(false);
  const [channel, setChannel] = useState(0);
  // The bar under the cursor: its bin samples show below that chart.
  const [hovered, setHovered] = useState<BinTarget | null>(null);

  const columns: Column[] = useMemo(() => {
    if (phase === null) {
      return current ? [{ label: 'current batch', color: CURRENT_COLOR, activation: current.activation, gradient: current.gradient }] : [];
    }
    const all = newest(history);
    const order = all.map((x) => x.phase);
    return all.map(({ phase: p, bucket }) => ({
      label: `${p} ep ${bucket.epoch}`,
      color: phaseColor(p, order),
      activation: bucket.activation,
      gradient: bucket.gradient,
    }));
  }, [phase, history, current]);

  if (phase === null && !current) {
    return (
      <p class="stats-note" data-testid={`stats-note-${layer}`}>
        {currentError ?? 'Waiting for a captured batch: step, or press Refresh while training runs.'}
      </p>
    );
  }
  if (phase !== null && !history) {
    return <p class="stats-note">No statistics for this layer yet: watch it (the eye) and let training run.</p>;
  }

  const channels = Math.max(0, ...columns.flatMap((c) => [c.activation?.channel_hists?.length ?? 0, c.gradient?.channel_hists?.length ?? 0]));
  const ch = Math.min(channel, Math.max(0, channels - 1));
  const showBands = s.band ?? tripped;
  const bands = showBands ? bandEdges(dtype, reportBands ?? []) : [];
  const position = phase === null && current ? current.position.text : null;

  return (
    <>
      {position && <p class="stats-note">Last captured batch: {position}</p>}
      {showBands && bands.length === 0 && (
        <p class="stats-note" data-testid={`band-note-${layer}`}>
          {hasBands(dtype, reportBands ?? [])
            ? `${dtype}'s subnormal and overflow edges lie outside the bins' span (1e-9..1e6): nothing to mark.`
            : `No subnormal/overflow band for ${dtype ?? 'an unknown dtype'}.`}
        </p>
      )}
      <div class="stats-tables">
        {columns.map((c) => (
          <StatsTable key={c.label} column={c} />
        ))}
      </div>
      <div class="stats-channel-row">
        <label class="switch-row" title={channels ? `Per-channel histograms are kept for ${channels} channel(s)` : 'No per-channel histograms were kept'}>
          <input type="checkbox" data-testid={`per-channel-${layer}`} checked={perChannel} disabled={channels === 0} onChange={(e) => setPerChannel(e.currentTarget.checked)} />
          Per channel
        </label>
        {perChannel && channels > 0 && (
          <select class="side-select mono" data-testid={`channel-${layer}`} value={ch} onChange={(e) => setChannel(Number(e.currentTarget.value))}>
            {Array.from({ length: channels }, (_, i) => (
              <option key={i} value={i}>
                channel {i}
              </option>
            ))}
          </select>
        )}
      </div>
      {edges &&
        KINDS.map((kind) => {
          const rows: HistogramRow[] = [];
          const notes: string[] = [];
          for (const c of columns) {
            const st = c[kind];
            if (!st) continue;
            const counts = perChannel ? (st.channel_hists?.[ch] ?? null) : st.hist;
            if (perChannel && !st.channel_hists?.[ch]) notes.push(`${c.label}: no channel ${ch} histogram, the whole layer is shown`);
            const use = counts ?? st.hist;
            if (!use) continue;
            rows.push({ label: c.label, color: c.color, counts: use });
            const clipped = clippedText(use, st);
            if (clipped) notes.push(`${c.label}: ${clipped}`);
            const sampled = sampledText(st);
            if (sampled) notes.push(`${c.label}: ${sampled}`);
          }
          const spec = histogramSpec({
            testid: `chart-${layer}-hist-${kind}`,
            title: `${layer} · ${KIND_TITLE[kind]}${perChannel ? ` · channel ${ch}` : ''}`,
            edges,
            rows,
            logX: s.logX,
            logY: s.logY,
            retain: s.retain,
            bands,
          });
          if (!rows.length) spec.empty = kind === 'gradient' ? 'No gradients: no backward pass ran through this layer here.' : 'No activations collected.';
          spec.onHover = (x) => {
            if (x == null) return;
            const bin = binAt(spec.x, x);
            setHovered((h) => (h && h.kind === kind && h.bin === bin ? h : { kind, bin }));
          };
          return (
            <div key={kind}>
              <Chart spec={spec} />
              {hovered?.kind === kind && (
                <BinSamples layer={layer} kind={kind} channel={perChannel && channels > 0 ? ch : null} bin={hovered.bin} />
              )}
              {notes.map((n) => (
                <p class="stats-note" key={n}>
                  {n}
                </p>
              ))}
            </div>
          );
        })}
      {phase !== null && history && (
        <div class="stats-distribution">
          <h3 class="stats-subhead">Across epochs · {phase}</h3>
          {KINDS.map((kind) => (
            <Chart
              key={kind}
              spec={distributionSpec(
                `chart-${layer}-dist-${kind}`,
                `${layer} · ${KIND_TITLE[kind]} over epochs · ${phase}`,
                history.phases[phase] ?? [],
                kind,
                s.logY,
                s.retain,
              )}
            />
          ))}
        </div>
      )}
    </>
  );
}

// The bin whose bar covers x: the last bin edge at or left of it (x holds
// the 212 edges, or their indices on a log axis).
function binAt(xs: number[], x: number): number {
  let lo = 0;
  let hi = xs.length - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if ((xs[mid] ?? Infinity) <= x) lo = mid;
    else hi = mid - 1;
  }
  return Math.min(lo, 210);
}

const ROWS: { key: keyof TensorStatsSnapshot; label: string }[] = [
  { key: 'n', label: 'n' },
  { key: 'mean', label: 'mean' },
  { key: 'std', label: 'std' },
  { key: 'median', label: 'median' },
  { key: 'min', label: 'min' },
  { key: 'max', label: 'max' },
];

function StatsTable({ column }: { column: Column }) {
  const cell = (st: TensorStatsSnapshot | null, key: keyof TensorStatsSnapshot) => {
    if (!st) return '—';
    const v = st[key];
    if (key === 'n') return formatCount(v as number);
    return formatNum(v as number | null, 4);
  };
  const nonFinite = (st: TensorStatsSnapshot | null) => (st ? st.nan + st.pos_inf + st.neg_inf : 0);
  const a = column.activation;
  const g = column.gradient;
  return (
    <table class="stats-table" data-testid="stats-table">
      <thead>
        <tr>
          <th class="stats-corner" style={{ background: `${column.color}33`, borderColor: column.color }}>
            {column.label}
          </th>
          <th>activations</th>
          <th>gradients</th>
        </tr>
      </thead>
      <tbody>
        {ROWS.map((r) => (
          <tr key={r.key}>
            <th>{r.label}</th>
            <td class="mono" data-stat={r.key}>{cell(a, r.key)}</td>
            <td class="mono">{cell(g, r.key)}</td>
          </tr>
        ))}
        {(nonFinite(a) > 0 || nonFinite(g) > 0) && (
          <tr>
            <th>NaN / ±Inf</th>
            <td class="mono stat-bad">{a ? `${a.nan} / ${a.pos_inf} / ${a.neg_inf}` : '—'}</td>
            <td class="mono stat-bad">{g ? `${g.nan} / ${g.pos_inf} / ${g.neg_inf}` : '—'}</td>
          </tr>
        )}
        <tr>
          <th>dead channels</th>
          <td class="mono">
            <DeadChannels stats={a} />
          </td>
          <td class="mono muted">—</td>
        </tr>
      </tbody>
    </table>
  );
}

// The CPU histograms count an even sample of a big tensor's values
// (WatchPerformance.histogram_sample); say so, and what stays exact.
function sampledText(st: TensorStatsSnapshot): string | null {
  const total = st.n + st.nan + st.pos_inf + st.neg_inf;
  if (!st.hist || !st.binned || st.binned >= total) return null;
  return (
    `histogram sampled: ${formatCount(st.binned)} of ${formatCount(total)} values (about 1 in ${Math.round(total / st.binned)}, evenly spread); ` +
    'n, mean, std, min, max, NaN/±Inf counts and dead channels count every value'
  );
}

const MAX_LISTED = 10;

function DeadChannels({ stats }: { stats: TensorStatsSnapshot | null }) {
  if (!stats || stats.dead_count == null) return <span class="muted" title="No per-channel histograms were kept">—</span>;
  const of = stats.channel_hists?.length ?? stats.channels;
  const listed = stats.dead_channels.slice(0, MAX_LISTED);
  const more = stats.dead_channels.length - listed.length;
  const title = stats.dead_count
    ? `Channels whose every value is in the zero band: ${listed.join(', ')}${more > 0 ? ` and ${more} more` : ''}`
    : 'No channel is dead';
  return (
    <span class={stats.dead_count ? 'dead-channels' : ''} title={title} data-testid="dead-channels">
      {stats.dead_count}
      {of ? ` / ${of}` : ''}
    </span>
  );
}

function GraphsBody({ layer, phase, history }: { layer: string; phase: string | null; history: StatsHistory | null }) {
  const s = useFields(statsStore, 'logY', 'retain');
  if (!history || phase === null) {
    return <p class="stats-note">No statistics for this layer yet: watch it (the eye) and let training run.</p>;
  }
  const buckets = history.phases[phase] ?? [];
  const params = Object.entries(history.parameters);
  return (
    <>
      {KINDS.map((kind) => (
        <Chart
          key={kind}
          spec={linesSpec(`chart-${layer}-lines-${kind}`, `${layer} · ${KIND_TITLE[kind]} · ${phase}`, buckets, kind, s.logY, s.retain)}
        />
      ))}
      {params.length > 0 && (
        <div class="stats-params" data-testid={`params-${layer}`}>
          <h3 class="stats-subhead">Parameters (at each epoch's first collected batch)</h3>
          {params.map(([name, samples]) => (
            <Chart
              key={name}
              spec={parameterSpec(`chart-${layer}-param-${name}`, name.startsWith(`${layer}.`) ? name : `${layer}.${name}`, samples, s.logY, s.retain)}
            />
          ))}
        </div>
      )}
    </>
  );
}
