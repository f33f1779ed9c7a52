// A minimal observable store. Components subscribe to a selected slice and
// re-render only when that slice changes, which keeps hover highlighting and
// status ticks cheap with hundreds of nodes and cards on the page.
import { useEffect, useRef, useState } from 'preact/hooks';

export interface Store<S> {
  get(): S;
  set(patch: Partial<S> | ((s: S) => Partial<S>)): void;
  subscribe(listener: () => void): () => void;
}

export function createStore<S extends object>(initial: S): Store<S> {
  let state = initial;
  const listeners = new Set<() => void>();
  return {
    get: () => state,
    set(patch) {
      const delta = typeof patch === 'function' ? patch(state) : patch;
      state = { ...state, ...delta };
      for (const l of [...listeners]) l();
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

export function useSelector<S, T>(store: Store<S>, select: (s: S) => T, equal: (a: T, b: T) => boolean = Object.is): T {
  const [value, setValue] = useState(() => select(store.get()));
  // The latest selector and value, read by the subscription without
  // resubscribing on every render.
  const ref = useRef({ select, equal, value });
  ref.current.select = select;
  ref.current.equal = equal;
  ref.current.value = value;
  useEffect(() => {
    const check = () => {
      const next = ref.current.select(store.get());
      if (!ref.current.equal(ref.current.value, next)) {
        ref.current.value = next;
        setValue(() => next);
      }
    };
    check();
    return store.subscribe(check);
  }, [store]);
  // A selector that depends on props can change between renders: answer
  // with its current result rather than the one from the last notification.
  const current = select(store.get());
  return equal(value, current) ? value : current;
}

export function shallowArrayEqual<T>(a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
}

// The same keys holding the same values (Object.is), e.g. two picks.
export function shallowEqual<T extends object>(a: T, b: T): boolean {
  if (Object.is(a, b)) return true;
  const keys = Object.keys(a) as (keyof T)[];
  return (
    keys.length === Object.keys(b).length &&
    keys.every((k) => Object.prototype.hasOwnProperty.call(b, k) && Object.is(a[k], b[k]))
  );
}

export function pick<S extends object, K extends keyof S>(state: S, keys: readonly K[]): Pick<S, K> {
  const out = {} as Pick<S, K>;
  for (const k of keys) out[k] = state[k];
  return out;
}

// The named fields of a store's state: the component re-renders when one of
// them changes, not on every change of the store (selecting the whole state
// would), and its type lets the component read only those.
export function useFields<S extends object, K extends keyof S>(store: Store<S>, ...keys: K[]): Pick<S, K> {
  return useSelector(store, (s) => pick(s, keys), shallowEqual);
}
