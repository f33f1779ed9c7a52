// The statistics' signed-log bins (src/stats/bins.h, generated into
// wire.gen.ts): 211 bins, 7 per decade over |x| in 1e-9..1e6 on each side,
// bin 105 the zero band |x| < 1e-9, the end bins also holding everything
// beyond ±1e6 and ±inf. Bin i spans edges[i]..edges[i+1] of the server's
// BINS + 1 edges.
import type { DebugBand, Num } from '../api/types';
import { histogramBins } from '../api/wire.gen';

export const BINS = histogramBins.bins;
export const ZERO_BIN = histogramBins.zero_bin;
// The span the bins resolve; band edges outside it are not drawn.
export const SPAN_MIN = histogramBins.zero_band;
export const SPAN_MAX = histogramBins.top;

export function num(v: Num | null | undefined): number {
  if (v == null) return NaN;
  if (v === 'nan') return NaN;
  if (v === 'inf') return Infinity;
  if (v === '-inf') return -Infinity;
  return v;
}

// A plotted value: non-finite numbers are gaps (uPlot draws numbers only).
export function plotted(v: Num | null | undefined): number | null {
  const n = num(v);
  return Number.isFinite(n) ? n : null;
}

// The edges as numbers, the open ends clamped to the span the bins resolve.
export function edgeValues(edges: Num[]): number[] {
  return edges.map((e) => Math.max(-SPAN_MAX, Math.min(SPAN_MAX, num(e))));
}

// Where a value falls on the bin-index axis (edge i at i): log-interpolated
// within its bin, linear within the zero band; null outside the edges.
export function indexOf(value: number, edges: number[]): number | null {
  if (!Number.isFinite(value) || edges.length < 2) return null;
  if (value < edges[0]! || value > edges[edges.length - 1]!) return null;
  let lo = 0;
  let hi = edges.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (edges[mid]! <= value) lo = mid;
    else hi = mid;
  }
  const a = edges[lo]!;
  const b = edges[hi]!;
  if (a === b) return lo;
  const frac =
    a > 0 && b > 0
      ? Math.log(value / a) / Math.log(b / a)
      : a < 0 && b < 0
        ? Math.log(-value / -a) / Math.log(-b / -a)
        : (value - a) / (b - a);
  return lo + frac;
}

// "-1e3", "0", "1e3": the label of an edge that is a power of ten.
export function decadeLabel(v: number): string {
  if (v === 0) return '0';
  const exp = Math.round(Math.log10(Math.abs(v)));
  return `${v < 0 ? '-' : ''}1e${exp}`;
}

// The edge indices on a power of ten, and the zero band's middle (labelled
// 0; its own edges ±1e-9 would crowd it), between min and max; thinned to
// every k-th decade, the same on both sides, so labels fit in `room`.
export function decadeTicks(edges: number[], min: number, max: number, room: number): number[] {
  const zero = ZERO_BIN + 0.5;
  const ticks: number[] = [];
  for (let i = 0; i < edges.length; i++) {
    if (i === ZERO_BIN || i === ZERO_BIN + 1) continue;
    const exp = Math.log10(Math.abs(edges[i]!));
    if (Math.abs(exp - Math.round(exp)) < 1e-9 && i >= min && i <= max) ticks.push(i);
  }
  if (zero >= min && zero <= max) ticks.push(zero);
  ticks.sort((a, b) => a - b);
  const step = Math.ceil(ticks.length / Math.max(2, Math.floor(room)));
  if (step <= 1) return ticks;
  // Decade k from the zero band's edge on either side: keep every step-th.
  return ticks.filter((t) => t === zero || Math.round((Math.abs(t - zero) - 0.5) / 7) % step === 0);
}

export function tickLabel(index: number, edges: number[]): string {
  if (Math.abs(index - (ZERO_BIN + 0.5)) < 1e-9) return '0';
  const i = Math.round(index);
  return decadeLabel(edges[i] ?? 0);
}

// finfo of the floating dtypes the server names (src/common/dtype.cpp).
const FINFO: Record<string, { tiny: number; max: number }> = {
  float16: { tiny: 6.103515625e-5, max: 65504 },
  bfloat16: { tiny: 1.1754943508222875e-38, max: 3.3895313892515355e38 },
  float32: { tiny: 1.1754943508222875e-38, max: 3.4028234663852886e38 },
  float64: { tiny: 2.2250738585072014e-308, max: 1.7976931348623157e308 },
};

// Whether the dtype has band edges at all (a floating dtype).
export function hasBands(dtype: string | null | undefined, bands: DebugBand[] = []): boolean {
  return dtype != null && (dtype in FINFO || bands.some((b) => b.dtype === dtype));
}

// The subnormal / overflow band edges of a dtype (±finfo.tiny, ±finfo.max/16:
// the numerical check's), those inside the span the bins resolve. The debug
// report's own band for the dtype wins when it has one.
export function bandEdges(dtype: string | null | undefined, bands: DebugBand[] = []): number[] {
  if (!dtype) return [];
  const reported = bands.find((b) => b.dtype === dtype);
  const f = reported ? { tiny: reported.tiny, overflow: reported.overflow } : FINFO[dtype] ? { tiny: FINFO[dtype].tiny, overflow: FINFO[dtype].max / 16 } : null;
  if (!f) return [];
  return [f.tiny, f.overflow]
    .filter((v) => v >= SPAN_MIN && v <= SPAN_MAX)
    .flatMap((v) => [-v, v])
    .sort((a, b) => a - b);
}

// The first and last bin with a count in any row; null when all are empty.
// `inner`: leave out the end bins (their far edges are ±1e6 whatever the
// values; a linear axis would squash everything else) unless they are all.
export function occupied(rows: (number[] | null)[], inner = false): [number, number] | null {
  if (inner) {
    const span = occupied(rows.map((r) => r?.map((c, i) => (i === 0 || i === BINS - 1 ? 0 : c)) ?? null));
    if (span) return span;
  }
  let first = Infinity;
  let last = -Infinity;
  for (const row of rows) {
    if (!row) continue;
    for (let i = 0; i < row.length; i++) {
      if (row[i]! > 0) {
        first = Math.min(first, i);
        last = Math.max(last, i);
      }
    }
  }
  return Number.isFinite(first) ? [first, last] : null;
}
