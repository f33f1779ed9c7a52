// Chart specs from the statistics: the histograms over the signed-log bins,
// the distribution across epochs, per-epoch lines, parameters and logged
// series. Each spec's table is exactly what its chart plots.
import type uPlot from 'uplot';
import type { EpochStats, Num, ParameterSample, TensorStatsSnapshot, Series } from '../api/types';
import { formatNum } from '../format';
import { BINS, decadeTicks, edgeValues, indexOf, num, occupied, plotted, tickLabel } from './bins';
import type { ChartSeries, ChartSpec, ChartTable } from './Chart';
import { STAT_COLORS } from './colors';

export type Kind = 'activation' | 'gradient';
export const KIND_TITLE: Record<Kind, string> = { activation: 'Activations', gradient: 'Gradients' };

// A table cell: a number as the server sent it ("nan", "inf" kept).
const cell = (v: Num | null | undefined): number | string | null => (v == null ? null : v);

const symlogY: uPlot.Scale = { distr: 4, asinh: 1e-3 };

function numberAxis(): Partial<uPlot.Axis> {
  return { values: (_u, splits) => splits.map((v) => formatNum(v)) };
}

// Epochs are whole numbers: ticks on whole epochs only.
const EPOCH_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000];
const epochAxis: Partial<uPlot.Axis> = { incrs: EPOCH_INCRS, values: (_u, splits) => splits.map((v) => String(v)) };

export interface HistogramRow {
  label: string;
  color: string;
  counts: number[];
}

export interface HistogramOptions {
  testid: string;
  title: string;
  edges: Num[];
  rows: HistogramRow[];
  logX: boolean;
  logY: boolean;
  retain: boolean;
  // Band edges (values) to mark with dotted lines.
  bands: number[];
}

// Counts over the bins as steps: x holds the 212 edges (Log x: their
// indices, so every bin is as wide as the next and powers of ten are evenly
// spaced), each count holding from its bin's lower edge to the next. The end
// bins hold values beyond ±1e6 and the infinities: a triangle marks them.
export function histogramSpec(o: HistogramOptions): ChartSpec {
  const edges = edgeValues(o.edges);
  const x = o.logX ? edges.map((_, i) => i) : edges;
  const ys = o.rows.map((r) => {
    const y: (number | null)[] = r.counts.map((c) => (o.logY && c <= 0 ? null : c));
    y.push(y[y.length - 1] ?? null);
    return y;
  });
  const span = occupied(o.rows.map((r) => r.counts), !o.logX);
  let xRange: [number, number] | null = null;
  if (span) {
    const lo = Math.max(0, span[0] - (o.logX ? 2 : 0));
    const hi = Math.min(BINS, span[1] + 1 + (o.logX ? 2 : 0));
    xRange = [x[lo]!, x[hi]!];
  }
  // Counts start at 0, with room above the tallest bar for the markers.
  const tallest = Math.max(0, ...o.rows.map((r) => Math.max(0, ...r.counts)));
  const yRange: [number, number] | null = o.logY || o.retain || tallest === 0 ? null : [0, tallest * 1.12];
  const series: ChartSeries[] = o.rows.map((r) => ({
    label: r.label,
    color: r.color,
    fill: `${r.color}40`,
    stepped: true,
    width: 1.25,
  }));
  const table: ChartTable = {
    columns: ['bin', 'lower', 'upper', ...o.rows.map((r) => r.label)],
    rows: Array.from({ length: BINS }, (_, i) => [i, cell(o.edges[i]), cell(o.edges[i + 1]), ...o.rows.map((r) => r.counts[i] ?? 0)]),
  };
  const xAxis: Partial<uPlot.Axis> = o.logX
    ? {
        splits: (u, _axis, min, max) => decadeTicks(edges, min, max, u.bbox.width / devicePixelRatio / 48),
        values: (_u, splits) => splits.map((i) => tickLabel(i, edges)),
      }
    : numberAxis();
  const toX = (v: number) => (o.logX ? indexOf(v, edges) : v);
  return {
    testid: o.testid,
    title: o.title,
    structure: `hist|${o.logX}|${o.logY}|${o.rows.map((r) => `${r.label}:${r.color}`).join(',')}`,
    xLabel: o.logX ? 'value (signed log)' : 'value',
    yLabel: 'count',
    x,
    series,
    ys,
    yScale: o.logY ? { distr: 3, log: 10 } : {},
    xAxis,
    yAxis: numberAxis(),
    xRange: o.retain ? null : xRange,
    yRange,
    retain: o.retain,
    table,
    empty: span ? null : 'No values in these bins.',
    overlay: (u) => {
      const ctx = u.ctx;
      const { left, top, width, height } = u.bbox;
      ctx.save();
      ctx.beginPath();
      ctx.rect(left, top, width, height);
      ctx.clip();
      // The subnormal / overflow band edges.
      ctx.setLineDash([4, 4]);
      ctx.strokeStyle = '#ff5a45';
      ctx.lineWidth = devicePixelRatio;
      for (const v of o.bands) {
        const at = toX(v);
        if (at == null) continue;
        const px = u.valToPos(at, 'x', true);
        ctx.beginPath();
        ctx.moveTo(px, top);
        ctx.lineTo(px, top + height);
        ctx.stroke();
      }
      ctx.setLineDash([]);
      // Clipped end bins.
      const s = 6 * devicePixelRatio;
      o.rows.forEach((r, k) => {
        for (const bin of [0, BINS - 1]) {
          if (!(r.counts[bin]! > 0)) continue;
          // On a linear axis the end bin may lie outside the range: mark it at the edge.
          const mid = Math.max(left + s, Math.min(left + width - s, u.valToPos((x[bin]! + x[bin + 1]!) / 2, 'x', true)));
          const y = top + s + k * s * 1.4;
          ctx.fillStyle = r.color;
          ctx.strokeStyle = '#0d1015';
          ctx.beginPath();
          ctx.moveTo(mid - s, y - s);
          ctx.lineTo(mid + s, y - s);
          ctx.lineTo(mid, y + s * 0.6);
          ctx.closePath();
          ctx.fill();
          ctx.stroke();
        }
      });
      ctx.restore();
    },
  };
}

// The end bins' counts, to say in words what the triangles mark.
export function clippedText(counts: number[], s: TensorStatsSnapshot): string | null {
  const low = counts[0] ?? 0;
  const high = counts[BINS - 1] ?? 0;
  if (!low && !high) return null;
  const parts: string[] = [];
  if (low) parts.push(`${low} at ≤ −1e6${s.neg_inf ? ` (${s.neg_inf} −Inf)` : ''}`);
  if (high) parts.push(`${high} at ≥ 1e6${s.pos_inf ? ` (${s.pos_inf} +Inf)` : ''}`);
  return `Clipped (▼): ${parts.join(', ')}`;
}

function epochRange(epochs: number[]): [number, number] | null {
  if (!epochs.length) return null;
  const lo = epochs[0]!;
  const hi = epochs[epochs.length - 1]!;
  return lo === hi ? [lo - 0.5, hi + 0.5] : [lo, hi];
}

// How the distribution moved across epochs (TensorBoard's distribution
// view): the min..max and mean±std bands, the median and the mean per epoch.
export function distributionSpec(testid: string, title: string, buckets: EpochStats[], kind: Kind, logY: boolean, retain: boolean): ChartSpec {
  const rows = buckets.filter((b) => b[kind] && b[kind]!.n > 0);
  const epochs = rows.map((b) => b.epoch);
  const get = (f: (s: TensorStatsSnapshot) => Num | null) => rows.map((b) => f(b[kind]!));
  const mean = get((s) => s.mean).map(plotted);
  const std = get((s) => s.std).map(plotted);
  const lower = mean.map((m, i) => (m == null || std[i] == null ? null : m - std[i]!));
  const upper = mean.map((m, i) => (m == null || std[i] == null ? null : m + std[i]!));
  const series: ChartSeries[] = [
    { label: 'min', color: `${STAT_COLORS.min}99`, width: 1 },
    { label: 'max', color: `${STAT_COLORS.max}99`, width: 1 },
    { label: 'mean−std', color: `${STAT_COLORS.std}99`, width: 1, dash: [3, 3] },
    { label: 'mean+std', color: `${STAT_COLORS.std}99`, width: 1, dash: [3, 3] },
    { label: 'median', color: STAT_COLORS.median, width: 2, points: rows.length < 40 },
    { label: 'mean', color: STAT_COLORS.mean, width: 1.5, dash: [6, 3] },
  ];
  const ys = [get((s) => s.min).map(plotted), get((s) => s.max).map(plotted), lower, upper, get((s) => s.median).map(plotted), mean];
  return {
    testid,
    title,
    structure: `dist|${logY}`,
    xLabel: 'epoch',
    xAxis: epochAxis,
    x: epochs,
    series,
    ys,
    bands: [
      { from: 1, to: 0, fill: 'rgba(76,154,255,0.10)' },
      { from: 3, to: 2, fill: 'rgba(167,139,250,0.22)' },
    ],
    yScale: logY ? symlogY : {},
    yAxis: numberAxis(),
    xRange: retain ? null : epochRange(epochs),
    retain,
    table: {
      columns: ['epoch', ...series.map((s) => s.label)],
      rows: epochs.map((e, i) => [e, ...ys.map((y) => y[i] ?? null)]),
    },
    empty: rows.length ? null : `No ${kind === 'activation' ? 'activations' : 'gradients'} collected in this phase yet.`,
  };
}

// Per-epoch lines of one layer's statistics in one phase (activations: plus
// the dead channel count on the right axis).
export function linesSpec(testid: string, title: string, buckets: EpochStats[], kind: Kind, logY: boolean, retain: boolean): ChartSpec {
  const rows = buckets.filter((b) => b[kind] != null);
  const epochs = rows.map((b) => b.epoch);
  const stats = ['mean', 'std', 'median', 'min', 'max'] as const;
  const series: ChartSeries[] = stats.map((k) => ({ label: k, color: STAT_COLORS[k], points: rows.length < 40 }));
  const table: ChartTable = { columns: ['epoch', ...stats], rows: [] };
  const ys: (number | null)[][] = stats.map((k) => rows.map((b) => plotted(b[kind]![k])));
  const raw: (Num | null)[][] = stats.map((k) => rows.map((b) => b[kind]![k]));
  if (kind === 'activation') {
    series.push({ label: 'dead channels', color: STAT_COLORS.dead, y2: true, dash: [2, 3], points: rows.length < 40 });
    table.columns.push('dead channels');
    ys.push(rows.map((b) => b.activation!.dead_count));
    raw.push(rows.map((b) => b.activation!.dead_count));
  }
  table.rows = epochs.map((e, i) => [e, ...raw.map((r) => cell(r[i]))]);
  return {
    testid,
    title,
    structure: `lines|${kind}|${logY}`,
    xLabel: 'epoch',
    xAxis: epochAxis,
    y2Label: kind === 'activation' ? 'dead channels' : undefined,
    x: epochs,
    series,
    ys,
    yScale: logY ? symlogY : {},
    yAxis: numberAxis(),
    xRange: retain ? null : epochRange(epochs),
    retain,
    table,
    empty: rows.length ? null : `No ${kind === 'activation' ? 'activations' : 'gradients'} collected in this phase yet.`,
  };
}

// One parameter by epoch: its norm, its gradient's norm, and how much the
// optimizer step changed it (update / weight, right axis).
export function parameterSpec(testid: string, title: string, samples: ParameterSample[], logY: boolean, retain: boolean): ChartSpec {
  const epochs = samples.map((p) => p.epoch);
  const keys = ['value_norm', 'grad_norm', 'update_ratio'] as const;
  const series: ChartSeries[] = [
    { label: 'value norm', color: STAT_COLORS.mean, points: samples.length < 40 },
    { label: 'grad norm', color: STAT_COLORS.std, points: samples.length < 40 },
    { label: 'update ratio', color: STAT_COLORS.median, y2: true, dash: [4, 3], points: samples.length < 40 },
  ];
  return {
    testid,
    title,
    structure: `param|${logY}`,
    xLabel: 'epoch',
    xAxis: epochAxis,
    y2Label: 'update / weight',
    x: epochs,
    series,
    ys: keys.map((k) => samples.map((p) => plotted(p[k]))),
    yScale: logY ? symlogY : {},
    yAxis: numberAxis(),
    xRange: retain ? null : epochRange(epochs),
    retain,
    table: { columns: ['epoch', ...keys], rows: samples.map((p) => [p.epoch, ...keys.map((k) => cell(p[k]))]) },
    empty: samples.length ? null : 'No samples of this parameter yet.',
  };
}

// A logged scalar or metric: per-batch points at their epoch fraction.
export function metricSpec(testid: string, title: string, s: Series, color: string, logY: boolean, retain: boolean): ChartSpec {
  // A point needs a place on the axis.
  const points = s.points.filter((p) => Number.isFinite(num(p.x)));
  return {
    testid,
    title,
    structure: `metric|${logY}|${color}`,
    xLabel: 'epoch',
    x: points.map((p) => num(p.x)),
    series: [{ label: s.name, color, points: points.length < 60 }],
    ys: [points.map((p) => plotted(p.value))],
    yScale: logY ? symlogY : {},
    yAxis: numberAxis(),
    xRange: null,
    retain,
    table: { columns: ['epoch', 'batch', 'x', 'value'], rows: points.map((p) => [p.epoch, p.batch, p.x, cell(p.value)]) },
    empty: points.length ? null : 'No points yet.',
  };
}
