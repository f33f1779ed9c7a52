// The Stats page's pure logic: the signed-log bins (src/stats/bins.ts), the
// chart specs' tables, which the download saves (specs.ts), and the CSV and
// JSON files made of them (download.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { EpochStats, Num, ParameterSample, TensorStatsSnapshot } from '../src/api/types';
import {
  BINS,
  ZERO_BIN,
  bandEdges,
  decadeLabel,
  decadeTicks,
  edgeValues,
  hasBands,
  indexOf,
  num,
  occupied,
  plotted,
  tickLabel,
} from '../src/stats/bins';
import { fileName, toCsv, toJson } from '../src/stats/download';
import { distributionSpec, histogramSpec, linesSpec, metricSpec, parameterSpec } from '../src/stats/specs';

// The server's 212 edges (src/stats/histogram.cpp's bin_edges): -1e6 ..
// -1e-9, then 1e-9 .. 1e6, 7 per decade, powers of ten exact.
function serverEdges(): number[] {
  const magnitudes: number[] = [];
  for (let k = 0; k <= 105; k++) magnitudes.push(k % 7 === 0 ? Number(`1e${-9 + k / 7}`) : 10 ** (-9 + k / 7));
  return [...magnitudes.map((m) => -m).reverse(), ...magnitudes];
}
const EDGES = serverEdges();

describe('bins', () => {
  test('the generated constants match the server edges', () => {
    assert.equal(BINS, 211);
    assert.equal(ZERO_BIN, 105);
    assert.equal(EDGES.length, BINS + 1);
    assert.equal(EDGES[ZERO_BIN], -1e-9);
    assert.equal(EDGES[ZERO_BIN + 1], 1e-9);
  });

  test('numbers as the server sends them', () => {
    assert.ok(Number.isNaN(num('nan')));
    assert.equal(num('inf'), Infinity);
    assert.equal(num('-inf'), -Infinity);
    assert.ok(Number.isNaN(num(null)));
    assert.equal(num(2.5), 2.5);
    assert.equal(plotted('inf'), null);
    assert.equal(plotted(-3), -3);
    assert.deepEqual(edgeValues(['-inf', -1, 0, 1, 'inf']), [-1e6, -1, 0, 1, 1e6]);
  });

  test('indexOf: log-interpolated within a bin, linear in the zero band, null outside', () => {
    assert.equal(indexOf(1, EDGES), 106 + 9 * 7);
    assert.equal(indexOf(-1, EDGES), 105 - 9 * 7);
    assert.ok(Math.abs(indexOf(10 ** (0.5 / 7), EDGES)! - (169 + 0.5)) < 1e-9);
    assert.equal(indexOf(0, EDGES), 105.5);
    assert.ok(Math.abs(indexOf(1e6, EDGES)! - 211) < 1e-9);
    assert.equal(indexOf(2e6, EDGES), null);
    assert.equal(indexOf(NaN, EDGES), null);
    assert.equal(indexOf(1, [1]), null);
  });

  test('decade ticks: every power of ten and the zero band, thinned alike on both sides', () => {
    const all = decadeTicks(EDGES, 0, 211, 100);
    assert.equal(all.length, 31);
    assert.ok(all.includes(105.5));
    assert.deepEqual(
      all.filter((t) => t > 105.5).map((t) => tickLabel(t, EDGES)),
      ['1e-8', '1e-7', '1e-6', '1e-5', '1e-4', '1e-3', '1e-2', '1e-1', '1e0', '1e1', '1e2', '1e3', '1e4', '1e5', '1e6'],
    );
    assert.equal(tickLabel(105.5, EDGES), '0');
    assert.equal(tickLabel(0, EDGES), '-1e6');
    const few = decadeTicks(EDGES, 0, 211, 4);
    assert.deepEqual(few, [49, 105.5, 162]);
    assert.deepEqual(
      decadeTicks(EDGES, 160, 200, 100).map((t) => tickLabel(t, EDGES)),
      ['1e-1', '1e0', '1e1', '1e2', '1e3', '1e4'],
    );
    assert.equal(decadeLabel(-1000), '-1e3');
    assert.equal(decadeLabel(0), '0');
  });

  test('band edges: the dtype finfo (tiny, max/16) inside the span, the report winning', () => {
    assert.deepEqual(bandEdges('float16'), [-65504 / 16, -6.103515625e-5, 6.103515625e-5, 65504 / 16]);
    // float32's are beyond what the bins resolve.
    assert.deepEqual(bandEdges('float32'), []);
    assert.deepEqual(bandEdges('float32', [{ dtype: 'float32', tiny: 1e-3, overflow: 1e3 }]), [-1e3, -1e-3, 1e-3, 1e3]);
    assert.deepEqual(bandEdges('int64'), []);
    assert.deepEqual(bandEdges(null), []);
    assert.equal(hasBands('bfloat16'), true);
    assert.equal(hasBands('int64'), false);
    assert.equal(hasBands('float8', [{ dtype: 'float8', tiny: 1, overflow: 2 }]), true);
  });

  test('occupied: the first and last bin with a count, the end bins left out when asked', () => {
    assert.deepEqual(occupied([[0, 0, 3, 0, 1, 0], null, [0, 1, 0, 0, 0, 0]]), [1, 4]);
    assert.equal(occupied([[0, 0], null]), null);
    const ends = new Array<number>(BINS).fill(0);
    ends[0] = 2;
    ends[120] = 1;
    ends[BINS - 1] = 5;
    assert.deepEqual(occupied([ends]), [0, BINS - 1]);
    assert.deepEqual(occupied([ends], true), [120, 120]);
    const onlyEnds = new Array<number>(BINS).fill(0);
    onlyEnds[BINS - 1] = 1;
    assert.deepEqual(occupied([onlyEnds], true), [BINS - 1, BINS - 1]);
  });
});

function stats(mean: Num | null, std: Num | null, extra: Partial<TensorStatsSnapshot> = {}): TensorStatsSnapshot {
  return {
    binned: 10,
    channel_hists: null,
    channels: 4,
    dead_channels: [],
    dead_count: 0,
    hist: null,
    max: 3,
    mean,
    median: 0.5,
    min: -1,
    n: 10,
    nan: 0,
    neg_inf: 0,
    pos_inf: 0,
    std,
    sum: 0,
    sum_sq: 0,
    ...extra,
  };
}

describe('chart tables', () => {
  test('histogram: a row per bin with its edges as sent and each series count', () => {
    const counts = new Array<number>(BINS).fill(0);
    counts[169] = 7;
    counts[170] = 2;
    const edges: Num[] = [...EDGES];
    edges[0] = '-inf';
    const spec = histogramSpec({
      testid: 't',
      title: 'h',
      edges,
      rows: [
        { label: 'train', color: '#d97706', counts },
        { label: 'val', color: '#3b82f6', counts: counts.map((c) => c * 2) },
      ],
      logX: true,
      logY: false,
      retain: false,
      bands: [],
    });
    assert.deepEqual(spec.table.columns, ['bin', 'lower', 'upper', 'train', 'val']);
    assert.equal(spec.table.rows.length, BINS);
    assert.deepEqual(spec.table.rows[0], [0, '-inf', EDGES[1], 0, 0]);
    assert.deepEqual(spec.table.rows[169], [169, EDGES[169], EDGES[170], 7, 14]);
    // Log x: the bin indices, the range around the occupied bins (2 either side).
    assert.equal(spec.x.length, BINS + 1);
    assert.equal(spec.x[5], 5);
    assert.deepEqual(spec.xRange, [167, 173]);
    assert.deepEqual(spec.yRange, [0, 14 * 1.12]);
    // Steps: the last count repeated at the last edge.
    assert.equal(spec.ys[0]!.length, BINS + 1);
    assert.equal(spec.empty, null);
    const none = histogramSpec({ testid: 't', title: 'h', edges, rows: [], logX: false, logY: true, retain: false, bands: [] });
    assert.equal(none.empty, 'No values in these bins.');
    assert.equal(none.x[0], -1e6);
  });

  test('distribution: min, max, mean±std, median and mean per epoch with any collected values', () => {
    const buckets: EpochStats[] = [
      { epoch: 0, batches: 3, activation: stats(1, 0.5), gradient: null },
      { epoch: 1, batches: 3, activation: stats(2, 'nan'), gradient: null },
      { epoch: 2, batches: 3, activation: stats(null, null, { n: 0 }), gradient: null },
    ];
    const spec = distributionSpec('d', 'dist', buckets, 'activation', false, false);
    assert.deepEqual(spec.table.columns, ['epoch', 'min', 'max', 'mean−std', 'mean+std', 'median', 'mean']);
    assert.deepEqual(spec.table.rows, [
      [0, -1, 3, 0.5, 1.5, 0.5, 1],
      [1, -1, 3, null, null, 0.5, 2],
    ]);
    assert.deepEqual(spec.xRange, [0, 1]);
    assert.match(distributionSpec('d', 'dist', buckets, 'gradient', false, false).empty!, /No gradients/);
  });

  test('lines: the values as sent ("nan" kept in the table, a gap in the plot), dead channels for activations', () => {
    const buckets: EpochStats[] = [
      { epoch: 3, batches: 1, activation: stats('nan', 1, { dead_count: 2 }), gradient: stats(0.1, 0.2) },
    ];
    const act = linesSpec('l', 'lines', buckets, 'activation', false, false);
    assert.deepEqual(act.table.columns, ['epoch', 'mean', 'std', 'median', 'min', 'max', 'dead channels']);
    assert.deepEqual(act.table.rows, [[3, 'nan', 1, 0.5, -1, 3, 2]]);
    assert.deepEqual(act.ys[0], [null]);
    assert.deepEqual(act.xRange, [2.5, 3.5]);
    const grad = linesSpec('l', 'lines', buckets, 'gradient', false, false);
    assert.deepEqual(grad.table.columns, ['epoch', 'mean', 'std', 'median', 'min', 'max']);
    assert.deepEqual(grad.table.rows, [[3, 0.1, 0.2, 0.5, -1, 3]]);
  });

  test('parameters and metrics', () => {
    const sample: ParameterSample = {
      epoch: 1,
      grad_max: null,
      grad_mean: null,
      grad_min: null,
      grad_norm: 'inf',
      grad_std: null,
      max: 1,
      mean: 0,
      min: -1,
      std: 0.5,
      update_ratio: null,
      value_norm: 4,
    };
    const p = parameterSpec('p', 'param', [sample], false, false);
    assert.deepEqual(p.table, { columns: ['epoch', 'value_norm', 'grad_norm', 'update_ratio'], rows: [[1, 4, 'inf', null]] });
    assert.deepEqual(p.ys, [[4], [null], [null]]);
    const m = metricSpec(
      'm',
      'loss',
      {
        layer: '',
        name: 'loss',
        phase: 'train',
        points: [
          { epoch: 0, batch: 0, x: 0, value: 2 },
          { epoch: 0, batch: 1, x: 'nan', value: 1 },
          { epoch: 0, batch: 2, x: 0.5, value: 'inf' },
        ],
      },
      '#fff',
      false,
      false,
    );
    assert.deepEqual(m.table.rows, [
      [0, 0, 0, 2],
      [0, 2, 0.5, 'inf'],
    ]);
    assert.deepEqual(m.x, [0, 0.5]);
    assert.deepEqual(m.ys, [[2, null]]);
  });

  test('the downloads: CSV quoting and empty cells, JSON keyed by column', () => {
    const table = { columns: ['epoch', 'name, "quoted"'], rows: [[1, 'a,b'], [2, null]] };
    assert.equal(toCsv(table), 'epoch,"name, ""quoted"""\n1,"a,b"\n2,\n');
    assert.deepEqual(JSON.parse(toJson(table, 'loss')), {
      chart: 'loss',
      columns: ['epoch', 'name, "quoted"'],
      rows: [
        { epoch: 1, 'name, "quoted"': 'a,b' },
        { epoch: 2, 'name, "quoted"': null },
      ],
    });
    assert.equal(fileName('conv1 · Activations · train', 'csv'), 'conv1_Activations_train.csv');
    assert.equal(fileName('···', 'json'), 'chart.json');
  });
});
