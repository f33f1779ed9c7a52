// One uPlot chart. It is built the first time it scrolls into view (only
// charts on screen draw), takes new data in place with setData, and is
// rebuilt only when its structure (series, scales) changes. The wrapper
// carries data-points (x values plotted) and data-series for the tests, and
// CSV / JSON buttons that download exactly the plotted rows.
import { useContext, useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { VisibilityContext } from '../cards/visibility';
import { formatNum } from '../format';
import { fileName, saveFile, toCsv, toJson } from './download';

export interface ChartSeries {
  label: string;
  color: string;
  // The secondary y axis (right).
  y2?: boolean;
  dash?: number[];
  width?: number;
  fill?: string;
  // A histogram: each value holds until the next x.
  stepped?: boolean;
  points?: boolean;
}

// What a chart shows, as a table: the download.
export interface ChartTable {
  columns: string[];
  rows: (number | string | null)[][];
}

export interface ChartSpec {
  testid: string;
  title: string;
  // Rebuilds the chart when it changes: series, scales, axes.
  structure: string;
  xLabel: string;
  yLabel?: string;
  y2Label?: string;
  x: number[];
  series: ChartSeries[];
  ys: (number | null)[][];
  // Fills between two series (indices into `series`).
  bands?: { from: number; to: number; fill: string }[];
  xScale?: uPlot.Scale;
  yScale?: uPlot.Scale;
  // Fixed ranges (else fitted to the data), read at each redraw.
  xRange?: [number, number] | null;
  yRange?: [number, number] | null;
  xAxis?: Partial<uPlot.Axis>;
  yAxis?: Partial<uPlot.Axis>;
  // Draws over the plot (markers, band edges), with the chart's own scales.
  overlay?: (u: uPlot) => void;
  table: ChartTable;
  height?: number;
  // Keep the current ranges instead of fitting each update.
  retain?: boolean;
  // Why there is nothing to draw, instead of an empty plot.
  empty?: string | null;
  // The x value under the cursor as it moves (null when it leaves the plot).
  onHover?: (x: number | null) => void;
}

const AXIS = { stroke: '#9aa5b4', grid: { stroke: 'rgba(255,255,255,0.07)' }, ticks: { stroke: 'rgba(255,255,255,0.15)' } };
const HEIGHT = 220;

function options(spec: ChartSpec, width: number, latest: { current: ChartSpec }): uPlot.Options {
  const stepped = uPlot.paths.stepped?.({ align: 1 });
  const hasY2 = spec.series.some((s) => s.y2);
  const opts: uPlot.Options = {
    width,
    height: spec.height ?? HEIGHT,
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false } },
    scales: {
      x: { time: false, ...spec.xScale, range: (_u, min, max) => latest.current.xRange ?? fit(min, max) },
      y: { ...spec.yScale, ...(spec.yScale?.distr === 3 ? {} : { range: (_u, min, max) => latest.current.yRange ?? fit(min, max) }) },
      ...(hasY2 ? { y2: {} } : {}),
    },
    axes: [
      { ...AXIS, label: spec.xLabel, ...spec.xAxis },
      { ...AXIS, label: spec.yLabel ?? '', scale: 'y', size: 60, ...spec.yAxis },
      ...(hasY2
        ? [{ ...AXIS, label: spec.y2Label ?? '', scale: 'y2', side: 1 as const, size: 70, grid: { show: false }, values: (_u: uPlot, splits: number[]) => splits.map((v) => formatNum(v)) }]
        : []),
    ],
    series: [
      { label: spec.xLabel },
      ...spec.series.map((s) => ({
        label: s.label,
        stroke: s.color,
        width: s.width ?? 1.5,
        scale: s.y2 ? 'y2' : 'y',
        ...(s.dash ? { dash: s.dash } : {}),
        ...(s.fill ? { fill: s.fill } : {}),
        ...(s.stepped && stepped ? { paths: stepped } : {}),
        points: { show: s.points ?? false },
        spanGaps: false,
      })),
    ],
    bands: spec.bands?.map((b) => ({ series: [b.from + 1, b.to + 1] as [number, number], fill: b.fill })),
    hooks: {
      draw: [(u) => latest.current.overlay?.(u)],
      setCursor: [
        (u) => {
          const left = u.cursor.left;
          latest.current.onHover?.(left == null || left < 0 ? null : u.posToVal(left, 'x'));
        },
      ],
    },
  };
  return opts;
}

// A little room around the data; a single value gets a unit span.
function fit(min: number | null, max: number | null): [number, number] {
  if (min == null || max == null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (min === max) return min === 0 ? [-1, 1] : [min - Math.abs(min) * 0.5, max + Math.abs(max) * 0.5];
  const pad = (max - min) * 0.05;
  return [min - pad, max + pad];
}

function dataOf(spec: ChartSpec): uPlot.AlignedData {
  return [spec.x, ...spec.ys] as uPlot.AlignedData;
}

export function Chart({ spec }: { spec: ChartSpec }) {
  const visibility = useContext(VisibilityContext);
  const wrap = useRef<HTMLDivElement>(null);
  const plotEl = useRef<HTMLDivElement>(null);
  const plot = useRef<{ u: uPlot; structure: string } | null>(null);
  const latest = useRef(spec);
  latest.current = spec;
  const [visible, setVisible] = useState(false);

  useEffect(() => {
    if (!wrap.current || !visibility) return;
    return visibility.observe(wrap.current, setVisible);
  }, [visibility]);

  // Build, rebuild or update in place; nothing while off screen.
  useEffect(() => {
    const el = plotEl.current;
    if (!el || !visible || spec.empty) return;
    const width = Math.max(200, el.clientWidth);
    const p = plot.current;
    if (!p || p.structure !== spec.structure) {
      p?.u.destroy();
      plot.current = { u: new uPlot(options(spec, width, latest), dataOf(spec), el), structure: spec.structure };
    } else {
      p.u.setData(dataOf(spec), !spec.retain);
    }
    if (wrap.current) wrap.current.dataset.drawnPoints = String(spec.x.length);
  }, [spec, visible]);

  // A chart that has nothing to show any more lets its plot go.
  useEffect(() => {
    if (spec.empty && plot.current) {
      plot.current.u.destroy();
      plot.current = null;
      if (wrap.current) delete wrap.current.dataset.drawnPoints;
    }
  }, [spec.empty]);

  useEffect(() => {
    const el = plotEl.current;
    if (!el) return;
    const observer = new ResizeObserver(() => {
      const p = plot.current;
      const width = Math.max(200, el.clientWidth);
      if (p && p.u.width !== width) p.u.setSize({ width, height: latest.current.height ?? HEIGHT });
    });
    observer.observe(el);
    return () => {
      observer.disconnect();
      plot.current?.u.destroy();
      plot.current = null;
    };
  }, []);

  const download = (ext: 'csv' | 'json') => {
    const s = latest.current;
    if (ext === 'csv') saveFile(fileName(s.title, 'csv'), toCsv(s.table), 'text/csv');
    else saveFile(fileName(s.title, 'json'), toJson(s.table, s.title), 'application/json');
  };

  return (
    <figure
      class="chart"
      ref={wrap}
      data-testid={spec.testid}
      data-points={spec.empty ? 0 : spec.x.length}
      data-series={spec.series.length}
    >
      <figcaption class="chart-head">
        <span class="chart-title">{spec.title}</span>
        <span class="toolbar-spacer" />
        {!spec.empty && (
          <>
            <button class="chip-button chart-dl" data-testid={`${spec.testid}-csv`} title="Download what this chart shows as CSV" onClick={() => download('csv')}>
              CSV
            </button>
            <button class="chip-button chart-dl" data-testid={`${spec.testid}-json`} title="Download what this chart shows as JSON" onClick={() => download('json')}>
              JSON
            </button>
          </>
        )}
      </figcaption>
      {spec.empty && <div class="chart-empty">{spec.empty}</div>}
      <div class="chart-plot" ref={plotEl} hidden={!!spec.empty} style={{ minHeight: `${(spec.height ?? HEIGHT) + 40}px` }} />
    </figure>
  );
}
