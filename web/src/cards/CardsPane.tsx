// The centre pane: render options, the layer menu and a card per shown layer,
// in the network's order.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { store, visibleLayers } from '../state/app';
import { shallowArrayEqual, useSelector } from '../state/store';
import { LayerCard } from './LayerCard';
import { LayerMenu } from './LayerMenu';
import { NonFiniteKey } from './Legend';
import { RenderOptions } from './RenderOptions';
import { Visibility, VisibilityContext } from './visibility';

export function CardsPane() {
  const architecture = useSelector(store, (s) => s.architecture);
  // A folded shape op has no card even if shown: it comes back with the
  // diagram's "Shape ops" switch.
  const visible = useSelector(store, visibleLayers);
  const shown = useSelector(store, (s) => s.shown, shallowArrayEqual);
  const focus = useSelector(store, (s) => (s.focus?.pane === 'cards' || s.focus?.pane === 'both' ? s.focus : null));
  const [visibility] = useState(() => new Visibility());
  const scroller = useRef<HTMLDivElement>(null);

  useEffect(() => {
    visibility.setRoot(scroller.current);
    return () => visibility.setRoot(null);
  }, [visibility]);

  const layers = useMemo(() => {
    const set = new Set(shown);
    return visible.filter((l) => set.has(l.name));
  }, [visible, shown]);

  // A request for a card not rendered yet (its layer just shown, or the
  // architecture still loading) is served once the card is there.
  const scrolled = useRef(0);
  useEffect(() => {
    if (!focus || focus.nonce === scrolled.current) return;
    const card = scroller.current?.querySelector(`[data-layer="${CSS.escape(focus.layer)}"]`);
    if (!card) return;
    scrolled.current = focus.nonce;
    card.scrollIntoView({ behavior: 'smooth', block: 'nearest' });
  }, [focus, layers]);

  return (
    <div class="pane cards-pane" data-testid="cards-pane">
      <div class="pane-toolbar">
        <LayerMenu />
        <RenderOptions />
        <div class="toolbar-spacer" />
        <NonFiniteKey />
      </div>
      <div class="cards-scroller" ref={scroller} data-testid="cards">
        <VisibilityContext.Provider value={visibility}>
          {layers.map((l) => (
            <LayerCard key={l.name} layer={l} />
          ))}
        </VisibilityContext.Provider>
        {layers.length === 0 && (
          <div class="empty-hint" data-testid="cards-empty">
            {architecture?.captured === false
              ? (architecture.reason ?? 'Waiting for the first captured batch…')
              : architecture
                ? 'Select a layer in the architecture to inspect it.'
                : 'Loading…'}
          </div>
        )}
      </div>
    </div>
  );
}
