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
