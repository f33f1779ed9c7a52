// The page's store (src/state/store.ts): patches, notifications and the
// field picks components select with.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createStore, pick, shallowArrayEqual, shallowEqual } from '../src/state/store';

test('set merges a patch (or a function of the state) and notifies until unsubscribed', () => {
  const store = createStore({ a: 1, b: 'x' });
  const seen: number[] = [];
  const off = store.subscribe(() => seen.push(store.get().a));
  store.set({ a: 2 });
  store.set((s) => ({ a: s.a * 10 }));
  assert.deepEqual(store.get(), { a: 20, b: 'x' });
  off();
  store.set({ a: 3 });
  assert.deepEqual(seen, [2, 20]);
});

test('pick and shallowEqual: equal picks while the picked fields keep their values', () => {
  const list = [1, 2];
  const state = { view: 'histogram', list, loading: true };
  const before = pick(state, ['view', 'list']);
  assert.deepEqual(Object.keys(before), ['view', 'list']);
  // A change elsewhere leaves the pick equal: no re-render.
  assert.ok(shallowEqual(before, pick({ ...state, loading: false }, ['view', 'list'])));
  // A new list (even an equal one) or another view is a change.
  assert.ok(!shallowEqual(before, pick({ ...state, list: [1, 2] }, ['view', 'list'])));
  assert.ok(!shallowEqual(before, pick({ ...state, view: 'graphs' }, ['view', 'list'])));
  assert.ok(!shallowEqual<Record<string, unknown>>({ a: 1 }, { a: 1, b: 2 }));
  assert.ok(!shallowEqual<Record<string, unknown>>({ a: undefined }, { b: undefined }));
  assert.ok(shallowEqual({ n: NaN }, { n: NaN }));
  assert.ok(shallowArrayEqual(['a', 'b'], ['a', 'b']));
  assert.ok(!shallowArrayEqual(['a'], ['a', 'b']));
});
