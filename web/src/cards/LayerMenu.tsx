// Which layers have a card: show or hide all, or pick from a filterable list
// (the diagram's click does the same one layer at a time). Folded shape ops
// are left out, as they are from the diagram.
import { useCallback, useMemo, useRef, useState } from 'preact/hooks';
import type { Layer } from '../api/types';
import { hideAll, showAll, store, toggleShown, visibleLayers } from '../state/app';
import { shallowArrayEqual, useSelector } from '../state/store';
import { useDismiss } from '../ui/useDismiss';

export function LayerMenu() {
  const architecture = useSelector(store, (s) => s.architecture);
  const layers = useSelector(store, visibleLayers);
  const shown = useSelector(store, (s) => s.shown, shallowArrayEqual);
  const [open, setOpen] = useState(false);
  const [filter, setFilter] = useState('');
  const ref = useRef<HTMLDivElement>(null);
  const close = useCallback(() => setOpen(false), []);
  useDismiss(ref, open, close);

  const shownSet = useMemo(() => new Set(shown), [shown]);
  const shownCount = useMemo(() => layers.filter((l) => shownSet.has(l.name)).length, [layers, shownSet]);
  const needle = filter.trim().toLowerCase();
  const matches = (l: Layer) => l.name.toLowerCase().includes(needle) || l.kind.toLowerCase().includes(needle);
  const listed = needle ? layers.filter(matches) : layers;
  // None shown matches: any layer that does is a folded shape op; say so.
  const foldedMatches = needle && listed.length === 0 ? (architecture?.layers.filter(matches).length ?? 0) : 0;

  return (
    <div class="menu-anchor" ref={ref}>
      <button
        class="chip-button"
        data-testid="layer-menu"
        aria-haspopup="menu"
        aria-expanded={open}
        disabled={!layers.length}
        onClick={() => setOpen(!open)}
        title="Choose which layers have a card"
      >
        <svg viewBox="0 0 24 24" width="15" height="15" aria-hidden="true">
          <path fill="currentColor" d="M12 4.5C7 4.5 2.73 7.61 1 12c1.73 4.39 6 7.5 11 7.5s9.27-3.11 11-7.5c-1.73-4.39-6-7.5-11-7.5zM12 17a5 5 0 1 1 0-10 5 5 0 0 1 0 10zm0-8a3 3 0 1 0 0 6 3 3 0 0 0 0-6z" />
        </svg>
        Layers <span class="mono">{shownCount}/{layers.length}</span>
        <span class="caret" aria-hidden="true">▾</span>
      </button>
      {open && (
        <div class="popover layer-menu" role="menu">
          <div class="layer-menu-actions">
            <button class="menu-item" role="menuitem" data-testid="show-all" onClick={showAll}>
              Show all layers
            </button>
            <button class="menu-item" role="menuitem" data-testid="hide-all" onClick={hideAll}>
              Hide all layers
            </button>
          </div>
          <input
            class="layer-filter"
            type="search"
            placeholder="Filter layers…"
            value={filter}
            onInput={(e) => setFilter(e.currentTarget.value)}
            aria-label="Filter layers"
          />
          <div class="layer-list">
            {listed.map((l) => (
              <label key={l.name} class="layer-list-item">
                <input type="checkbox" checked={shownSet.has(l.name)} onChange={() => toggleShown(l.name)} />
                <span class="mono">{l.name}</span>
                <span class={`kind-badge role-${l.role}`}>{l.kind}</span>
              </label>
            ))}
            {listed.length === 0 && (
              <div class="layer-list-empty">
                {foldedMatches
                  ? `No layer listed matches, but ${foldedMatches} folded shape op${foldedMatches === 1 ? ' does' : 's do'}: turn on "Shape ops" in the Architecture pane to list ${foldedMatches === 1 ? 'it' : 'them'}.`
                  : 'No layer matches.'}
              </div>
            )}
          </div>
        </div>
      )}
    </div>
  );
}
