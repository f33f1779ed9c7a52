// The diagram's search box: layers whose name holds what is typed, listed
// as you type; Enter or a click reveals one (opens the groups it is in,
// centres the diagram on it and shows its card, as clicking its node does).
import { useMemo, useState } from 'preact/hooks';
import { requestFocus, store } from '../state/app';
import { searchLayers } from './groups';

const LIMIT = 12;

export function reveal(layer: string): void {
  const { shown } = store.get();
  if (!shown.includes(layer)) store.set({ shown: [...shown, layer] });
  // The diagram opens the layer's groups and centres on it; the cards pane
  // scrolls to its card.
  requestFocus(layer, 'both');
}

export function GraphSearch({ names }: { names: string[] }) {
  const [query, setQuery] = useState('');
  const [active, setActive] = useState(0);
  const [open, setOpen] = useState(false);
  const hits = useMemo(() => searchLayers(names, query, LIMIT + 1), [names, query]);
  const more = hits.length > LIMIT;
  const list = hits.slice(0, LIMIT);
  const pick = (name: string) => {
    reveal(name);
    setOpen(false);
  };
  return (
    <div class="graph-search">
      <input
        type="search"
        class="graph-search-input"
        data-testid="graph-search"
        placeholder="Find a layer"
        aria-label="Find a layer in the diagram"
        value={query}
        onInput={(e) => {
          setQuery(e.currentTarget.value);
          setActive(0);
          setOpen(true);
        }}
        onFocus={() => setOpen(true)}
        onBlur={() => setOpen(false)}
        onKeyDown={(e) => {
          if (e.key === 'ArrowDown') {
            e.preventDefault();
            setActive((a) => Math.min(a + 1, list.length - 1));
          } else if (e.key === 'ArrowUp') {
            e.preventDefault();
            setActive((a) => Math.max(a - 1, 0));
          } else if (e.key === 'Enter') {
            const hit = list[active];
            if (hit) pick(hit);
          } else if (e.key === 'Escape') {
            setOpen(false);
          }
        }}
      />
      {open && query.trim() && (
        <ul class="graph-search-results" data-testid="graph-search-results" role="listbox">
          {list.map((name, i) => (
            <li
              key={name}
              role="option"
              aria-selected={i === active}
              class={i === active ? 'active' : ''}
              data-testid={`graph-search-hit-${name}`}
              // mousedown, not click: the input's blur would close the list first.
              onMouseDown={(e) => {
                e.preventDefault();
                pick(name);
              }}
              onMouseEnter={() => setActive(i)}
            >
              {name}
            </li>
          ))}
          {!list.length && <li class="muted graph-search-none">no layer matches</li>}
          {more && <li class="muted graph-search-none">more match; type more of the name</li>}
        </ul>
      )}
    </div>
  );
}
