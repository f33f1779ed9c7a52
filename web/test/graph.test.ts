// The diagram's pure logic: the layered layout, module groups and folding
// shape ops (src/graph/layered.ts, groups.ts, fold.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Edge, Layer } from '../src/api/types';
import { foldShapeOps, isFolded } from '../src/graph/fold';
import {
  ancestors,
  buildGroups,
  groupGraph,
  groupId,
  isGroupId,
  openingDepth,
  pathOfId,
  representative,
  searchLayers,
} from '../src/graph/groups';
import { type LayeredOptions, layeredLayout } from '../src/graph/layered';
import type { LayoutResult, PlacedNode } from '../src/graph/layoutTypes';

const OPT: LayeredOptions = { nodesep: 20, ranksep: 40, edgesep: 10, marginx: 8, marginy: 6 };

function layout(names: string[], edges: [string, string][], width = 100, height = 36): LayoutResult {
  return layeredLayout(
    { id: 7, nodes: names.map((id) => ({ id, width, height })), edges: edges.map(([from, to]) => ({ from, to })) },
    OPT,
  );
}

function byId(r: LayoutResult): Map<string, PlacedNode> {
  return new Map(r.nodes.map((n) => [n.id, n]));
}

describe('layeredLayout', () => {
  test('a chain is one column, each node a rank below the last', () => {
    const r = layout(['a', 'b', 'c'], [['a', 'b'], ['b', 'c']]);
    assert.equal(r.id, 7);
    const n = byId(r);
    assert.equal(n.get('b')!.y - n.get('a')!.y, 36 + OPT.ranksep);
    assert.equal(n.get('c')!.y - n.get('b')!.y, 36 + OPT.ranksep);
    assert.equal(n.get('a')!.x, n.get('b')!.x);
    assert.equal(n.get('b')!.x, n.get('c')!.x);
    // The margins around the one column.
    assert.equal(n.get('a')!.x - 50, OPT.marginx);
    assert.equal(r.width, 100 + 2 * OPT.marginx);
    assert.equal(n.get('a')!.y - 18, OPT.marginy);
    assert.equal(r.height, 3 * 36 + 2 * OPT.ranksep + 2 * OPT.marginy);
  });

  test('a diamond: the branches share a rank without overlapping, the ends centred between them', () => {
    const r = layout(['a', 'b', 'c', 'd'], [['a', 'b'], ['a', 'c'], ['b', 'd'], ['c', 'd']]);
    const n = byId(r);
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((k) => n.get(k)!);
    assert.equal(b!.y, c!.y);
    assert.ok(a!.y < b!.y && b!.y < d!.y);
    assert.ok(Math.abs(b!.x - c!.x) >= 100 + OPT.nodesep - 1e-9, `b at ${b!.x}, c at ${c!.x}`);
    assert.ok(Math.abs(d!.x - (b!.x + c!.x) / 2) < 1e-9);
    assert.ok(Math.abs(a!.x - (b!.x + c!.x) / 2) < 1e-9);
    for (const node of r.nodes) {
      assert.ok(node.x - node.width / 2 >= OPT.marginx - 1e-9 && node.x + node.width / 2 <= r.width - OPT.marginx + 1e-9);
    }
  });

  test('an edge that skips ranks bends through one point per skipped rank, from bottom to top', () => {
    const r = layout(['a', 'b', 'c'], [['a', 'b'], ['b', 'c'], ['a', 'c']]);
    const n = byId(r);
    const long = r.edges.find((e) => e.from === 'a' && e.to === 'c')!;
    assert.equal(long.points.length, 3);
    assert.deepEqual(long.points[0], { x: n.get('a')!.x, y: n.get('a')!.y + 18 });
    assert.deepEqual(long.points[2], { x: n.get('c')!.x, y: n.get('c')!.y - 18 });
    assert.equal(long.points[1]!.y, n.get('b')!.y);
    // The bend sits beside b, not through it.
    assert.ok(Math.abs(long.points[1]!.x - n.get('b')!.x) >= 50 + OPT.edgesep / 2 + OPT.edgesep - 1e-9);
    const short = r.edges.find((e) => e.from === 'a' && e.to === 'b')!;
    assert.equal(short.points.length, 2);
  });

  test('repeated nodes, self-loops, repeated edges and edges to unknown nodes are left out', () => {
    const r = layeredLayout(
      {
        id: 1,
        nodes: [
          { id: 'a', width: 10, height: 10 },
          { id: 'b', width: 10, height: 10 },
          { id: 'a', width: 99, height: 99 },
        ],
        edges: [
          { from: 'a', to: 'b' },
          { from: 'a', to: 'b' },
          { from: 'b', to: 'b' },
          { from: 'b', to: 'ghost' },
        ],
      },
      OPT,
    );
    assert.deepEqual(
      r.nodes.map((x) => [x.id, x.width]),
      [
        ['a', 10],
        ['b', 10],
      ],
    );
    assert.deepEqual(
      r.edges.map((e) => [e.from, e.to]),
      [['a', 'b']],
    );
  });

  test('a cycle ends: every node placed, the edge against the ranks drawn reversed but still named from -> to', () => {
    const r = layout(['a', 'b', 'c'], [['a', 'b'], ['b', 'c'], ['c', 'a']]);
    assert.equal(r.nodes.length, 3);
    const n = byId(r);
    const back = r.edges.find((e) => e.from === 'c' && e.to === 'a')!;
    // Drawn from c's top up to a's bottom: it leaves and enters each node on
    // the side that faces the other.
    assert.ok(n.get('a')!.y < n.get('c')!.y);
    assert.equal(back.points[0]!.y, n.get('c')!.y - 18);
    assert.equal(back.points[back.points.length - 1]!.y, n.get('a')!.y + 18);
  });

  test('an empty graph', () => {
    const r = layout([], []);
    assert.deepEqual(r.nodes, []);
    assert.equal(r.width, 2 * OPT.marginx);
  });
});

const MODEL = [
  'input',
  'encoder.layers.0.attn',
  'encoder.layers.0.ff',
  'encoder.layers.1.attn',
  'encoder.layers.1.ff',
  'head',
];

describe('module groups', () => {
  test('groups by dotted prefix, skipping a level that holds what the level below holds', () => {
    const tree = buildGroups(MODEL);
    assert.deepEqual(tree.loose, ['input', 'head']);
    // "encoder" holds exactly what "encoder.layers" holds: one level.
    assert.deepEqual(
      tree.roots.map((g) => g.path),
      ['encoder.layers'],
    );
    const top = tree.roots[0]!;
    assert.deepEqual(
      top.groups.map((g) => [g.path, g.depth, g.layers]),
      [
        ['encoder.layers.0', 1, ['encoder.layers.0.attn', 'encoder.layers.0.ff']],
        ['encoder.layers.1', 1, ['encoder.layers.1.attn', 'encoder.layers.1.ff']],
      ],
    );
    assert.deepEqual(top.all, MODEL.slice(1, 5));
    assert.equal(tree.height, 2);
    assert.deepEqual(
      ancestors(tree, 'encoder.layers.1.ff').map((g) => g.path),
      ['encoder.layers', 'encoder.layers.1'],
    );
    assert.deepEqual(ancestors(tree, 'head'), []);
  });

  test('a prefix with one layer is no group; a layer named like a group sits inside it', () => {
    const tree = buildGroups(['stem.conv', 'block', 'block.conv', 'block.relu']);
    assert.deepEqual(tree.loose, ['stem.conv']);
    assert.equal(tree.roots.length, 1);
    assert.deepEqual(tree.roots[0]!.layers, ['block', 'block.conv', 'block.relu']);
  });

  test('a collapsed group is one node; edges inside it vanish, edges onto it are listed once', () => {
    const tree = buildGroups(MODEL);
    const edges: Edge[] = [
      { from: 'input', to: 'encoder.layers.0.attn' },
      { from: 'encoder.layers.0.attn', to: 'encoder.layers.0.ff' },
      { from: 'encoder.layers.0.ff', to: 'encoder.layers.1.attn' },
      { from: 'input', to: 'encoder.layers.0.ff' },
      { from: 'encoder.layers.1.attn', to: 'encoder.layers.1.ff' },
      { from: 'encoder.layers.1.ff', to: 'head' },
    ];
    const l0 = groupId('encoder.layers.0');
    const openExceptL0 = (g: { path: string }) => g.path !== 'encoder.layers.0';
    const shown = groupGraph(tree, MODEL, edges, openExceptL0);
    assert.deepEqual(shown.nodes, ['input', l0, 'encoder.layers.1.attn', 'encoder.layers.1.ff', 'head']);
    assert.deepEqual(shown.edges, [
      { from: 'input', to: l0 },
      { from: l0, to: 'encoder.layers.1.attn' },
      { from: 'encoder.layers.1.attn', to: 'encoder.layers.1.ff' },
      { from: 'encoder.layers.1.ff', to: 'head' },
    ]);
    assert.equal(shown.drawnAs.get('encoder.layers.0.ff'), l0);
    // Open with something shown inside: encoder.layers.0 is collapsed.
    assert.deepEqual(
      shown.open.map((g) => g.path),
      ['encoder.layers', 'encoder.layers.1'],
    );
    assert.equal(representative(tree, 'encoder.layers.0.ff', openExceptL0), l0);
    assert.equal(representative(tree, 'encoder.layers.1.ff', openExceptL0), 'encoder.layers.1.ff');
    // All collapsed: the outermost group stands for everything under it.
    const closed = groupGraph(tree, MODEL, edges, () => false);
    assert.deepEqual(closed.nodes, ['input', groupId('encoder.layers'), 'head']);
    assert.ok(isGroupId(closed.nodes[1]!) && !isGroupId('input'));
    assert.equal(pathOfId(closed.nodes[1]!), 'encoder.layers');
  });

  test('openingDepth opens as deep as fits', () => {
    const tree = buildGroups(MODEL);
    // Depth 0: 3 nodes; 1: input, two groups, head = 4; 2: all 6 layers.
    assert.equal(openingDepth(tree, 6), 2);
    assert.equal(openingDepth(tree, 5), 1);
    assert.equal(openingDepth(tree, 3), 0);
  });

  test('searchLayers ranks a match of the last name part first, then of the start', () => {
    const names = ['buffer', 'ffx.conv', 'encoder.ff', 'ff_head', 'decoder.ffn', 'x.y'];
    assert.deepEqual(searchLayers(names, ' FF '), ['encoder.ff', 'ff_head', 'decoder.ffn', 'ffx.conv', 'buffer']);
    assert.deepEqual(searchLayers(names, 'ff', 2), ['encoder.ff', 'ff_head']);
    assert.deepEqual(searchLayers(names, '   '), []);
  });
});

function layer(name: string, shapeOp = false): Layer {
  return {
    name,
    shape_op: shapeOp,
    description: '',
    dtype: 'float32',
    kind: shapeOp ? 'view' : 'Linear',
    module: name,
    ops: [],
    output_shape: [],
    parameters: [],
    role: shapeOp ? 'op' : 'module',
  };
}

describe('folding shape ops', () => {
  test('a chain of shape ops between two layers becomes one edge', () => {
    const layers = [layer('conv'), layer('view', true), layer('permute', true), layer('fc'), layer('side')];
    const edges: Edge[] = [
      { from: 'conv', to: 'view' },
      { from: 'view', to: 'permute' },
      { from: 'permute', to: 'fc' },
      { from: 'view', to: 'side' },
      { from: 'conv', to: 'side' },
    ];
    const folded = foldShapeOps(layers, edges, (l) => isFolded(l, false));
    assert.deepEqual(
      folded.layers.map((l) => l.name),
      ['conv', 'fc', 'side'],
    );
    assert.deepEqual(folded.edges, [
      { from: 'conv', to: 'fc' },
      { from: 'conv', to: 'side' },
    ]);
  });

  test('shown shape ops, and graphs without any, come back as given', () => {
    const layers = [layer('a'), layer('view', true), layer('b')];
    const edges: Edge[] = [
      { from: 'a', to: 'view' },
      { from: 'view', to: 'b' },
    ];
    const shown = foldShapeOps(layers, edges, (l) => isFolded(l, true));
    assert.equal(shown.layers, layers);
    assert.equal(shown.edges, edges);
  });

  test('a cycle of folded ops (a malformed answer) ends', () => {
    const layers = [layer('a'), layer('v1', true), layer('v2', true), layer('b')];
    const edges: Edge[] = [
      { from: 'a', to: 'v1' },
      { from: 'v1', to: 'v2' },
      { from: 'v2', to: 'v1' },
      { from: 'v2', to: 'b' },
    ];
    const folded = foldShapeOps(layers, edges, (l) => l.shape_op);
    assert.deepEqual(folded.edges, [{ from: 'a', to: 'b' }]);
  });
});
