// Which layers have a card: show or hide all, or pick from a filterable list
// (the diagram's click does the same one layer at a time). Folded shape ops
// are left out, as they are from the diagram. The menu also switches the
// collection of statistics off and back on (the chip's eye says which), and
// opens the Stats page on any layer's current batch or on a shown layer's
// statistics.
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import * as api from '../api/client';
import type { Layer, StatsScope } from '../api/types';
import { pageHref } from '../links';
import { FIXED_BY_RECORDING, hideAll, mainRecording, showAll, store, toast, toggleShown, visibleLayers } from '../state/app';
import { isLocked } from '../state/locked';
import { applyStatus } from '../state/sync';
import { shallowArrayEqual, useSelector } from '../state/store';
import { useDismiss } from '../ui/useDismiss';

// The scope collection goes back to when switched on again: the last one
// this browser saw collecting, else the watched layers'.
const SCOPE_KEY = 'nansense.collectScope';

function rememberedScope(): StatsScope {
  const v = localStorage.getItem(SCOPE_KEY);
  return v === 'all' || v === 'watched' ? v : 'watched';
}

async function setCollecting(on: boolean): Promise<void> {
  try {
    await api.setStatsScope(on ? rememberedScope() : 'none');
    // The status push says so; without the channel, ask.
    if (store.get().connection !== 'open') applyStatus(await api.getStatus());
  } catch (e) {
    toast(e instanceof Error ? e.message : String(e));
  }
}

export function LayerMenu() {
  const architecture = useSelector(store, (s) => s.architecture);
  const layers = useSelector(store, visibleLayers);
  const shown = useSelector(store, (s) => s.shown, shallowArrayEqual);
  const scope = useSelector(store, (s) => s.status?.stats?.scope ?? null);
  const locked = useSelector(store, (s) => isLocked(s.status));
  const recording = useSelector(store, mainRecording);
  const [open, setOpen] = useState(false);
  const [currentOpen, setCurrentOpen] = useState(false);
  const [filter, setFilter] = useState('');
  useEffect(() => {
    if (scope === 'watched' || scope === 'all') localStorage.setItem(SCOPE_KEY, scope);
  }, [scope]);
  useEffect(() => {
    if (!open) setCurrentOpen(false);
  }, [open]);
  const collecting = scope !== null && scope !== 'none';
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
        data-collecting={scope === null ? undefined : String(collecting)}
        title={`Choose which layers have a card${scope === null ? '' : collecting ? `; statistics are collected (${scope === 'all' ? 'every layer' : 'the watched layers'})` : '; statistics collection is paused'}`}
      >
        <svg class={`layer-menu-eye ${collecting ? 'eye-on' : scope === null ? '' : 'eye-off'}`} viewBox="0 0 24 24" width="15" height="15" aria-hidden="true">
          <path fill="currentColor" d={collecting || scope === null ? EYE : EYE_OFF} />
        </svg>
        Layers <span class="mono">{shownCount}/{layers.length}</span>
        <span class="caret" aria-hidden="true">▾</span>
      </button>
      {open && (
        <div class="popover layer-menu" role="menu">
          <div class="layer-menu-actions">
            <button class="menu-item" role="menuitem" data-testid="show-all" disabled={recording} title={recording ? FIXED_BY_RECORDING : undefined} onClick={showAll}>
              Show all layers
            </button>
            <button class="menu-item" role="menuitem" data-testid="hide-all" disabled={recording} title={recording ? FIXED_BY_RECORDING : undefined} onClick={hideAll}>
              Hide all layers
            </button>
          </div>
          {!locked && scope !== null && (
            <button
              class="menu-item layer-menu-row"
              role="menuitemcheckbox"
              aria-checked={collecting}
              data-testid="toggle-collecting"
              title={collecting ? 'Stop collecting statistics (the collected ones are kept)' : `Collect statistics again (${rememberedScope() === 'all' ? 'every layer' : 'the watched layers'})`}
              onClick={() => void setCollecting(!collecting)}
            >
              {collecting ? 'Pause collecting stats' : 'Resume collecting stats'}
            </button>
          )}
          <div class="menu-anchor">
            <button
              class="menu-item layer-menu-row"
              role="menuitem"
              aria-haspopup="menu"
              aria-expanded={currentOpen}
              data-testid="current-stats-menu"
              title="A layer's statistics in the last captured batch, on the Stats page (any layer, watched or not)"
              onClick={() => setCurrentOpen(!currentOpen)}
            >
              Current-batch stats <span class="caret" aria-hidden="true">▸</span>
            </button>
            {currentOpen && (
              <div class="popover layer-submenu" role="menu" data-testid="current-stats-list">
                {layers.map((l) => (
                  <a
                    key={l.name}
                    class="menu-item mono"
                    role="menuitem"
                    data-testid={`current-stats-${l.name}`}
                    href={pageHref('stats', { layer: l.name, phase: 'current' })}
                  >
                    {l.name}
                  </a>
                ))}
              </div>
            )}
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
                <input type="checkbox" checked={shownSet.has(l.name)} disabled={recording} onChange={() => toggleShown(l.name)} />
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
          {shownCount > 0 && (
            <div class="layer-menu-stats" data-testid="open-stats-list">
              <div class="menu-hint">Open statistics</div>
              {layers
                .filter((l) => shownSet.has(l.name))
                .map((l) => (
                  <a key={l.name} class="menu-item mono" role="menuitem" data-testid={`open-stats-${l.name}`} href={pageHref('stats', { layer: l.name })}>
                    {l.name}
                  </a>
                ))}
            </div>
          )}
        </div>
      )}
    </div>
  );
}

const EYE =
  'M12 4.5C7 4.5 2.73 7.61 1 12c1.73 4.39 6 7.5 11 7.5s9.27-3.11 11-7.5c-1.73-4.39-6-7.5-11-7.5zM12 17a5 5 0 1 1 0-10 5 5 0 0 1 0 10zm0-8a3 3 0 1 0 0 6 3 3 0 0 0 0-6z';
const EYE_OFF =
  'M12 7a5 5 0 0 1 5 5c0 .65-.13 1.26-.36 1.83l2.92 2.92A11.8 11.8 0 0 0 23 12c-1.73-4.39-6-7.5-11-7.5-1.4 0-2.74.25-3.98.7l2.16 2.16C10.74 7.13 11.35 7 12 7zM2 4.27l2.28 2.28.46.46A11.8 11.8 0 0 0 1 12c1.73 4.39 6 7.5 11 7.5 1.55 0 3.03-.3 4.38-.84l.42.42L19.73 22 21 20.73 3.27 3 2 4.27zM7.53 9.8l1.55 1.55A2.8 2.8 0 0 0 9 12a3 3 0 0 0 3 3c.22 0 .44-.03.65-.08l1.55 1.55A5 5 0 0 1 7 12c0-.79.2-1.53.53-2.2zm4.31-.78 3.15 3.15.02-.16a3 3 0 0 0-3-3l-.17.01z';
