// The Stats page (/stats): the shared top bar, a sidebar of choices (view,
// phase, layer, axes) and a card per shown layer, charts drawn only while on
// screen.
import { useEffect, useState } from 'preact/hooks';
import { Dialogs } from '../App';
import { Visibility, VisibilityContext } from '../cards/visibility';
import { store } from '../state/app';
import { shownLayers, shownPhase, startStatsSync, statsStore } from '../state/stats';
import { useFields, useSelector } from '../state/store';
import { Banners } from '../topbar/Banners';
import { TopBar } from '../topbar/TopBar';
import { MetricsSection } from './MetricsSection';
import { Sidebar } from './Sidebar';
import { StatsCard } from './StatsCard';

export function StatsPage() {
  const s = useFields(statsStore, 'view', 'phase', 'layer', 'list');
  const firstLayer = useSelector(store, (x) => x.architecture?.layers.find((l) => l.role !== 'input')?.name ?? null);
  const livePhase = useSelector(store, (x) => x.status?.live_position?.phase ?? null);
  const [visibility] = useState(() => new Visibility());
  const [scroller, setScroller] = useState<HTMLElement | null>(null);

  useEffect(() => startStatsSync(), []);
  useEffect(() => {
    visibility.setRoot(scroller);
    return () => visibility.setRoot(null);
  }, [visibility, scroller]);

  const layers = shownLayers(s, firstLayer);
  const phase = shownPhase(s, layers, livePhase);

  return (
    <div class="app stats-app">
      <TopBar page="stats" />
      <Banners />
      <div class="stats-body">
        <Sidebar layers={layers} phase={phase} />
        <main
          class="stats-main"
          ref={setScroller}
          data-testid="stats-main"
          data-tour="stats-cards"
          data-view={s.view}
          data-phase={phase ?? 'current'}
          data-stats-sequence={s.list?.sequence ?? 0}
        >
          <VisibilityContext.Provider value={visibility}>
            <RanksNote />
            <StatsEmpty layers={layers} phase={phase} />
            {layers.map((layer) => (
              <StatsCard key={layer} layer={layer} phase={phase} />
            ))}
            {s.view === 'graphs' && <MetricsSection layers={layers} />}
          </VisibilityContext.Provider>
        </main>
      </div>
      <Dialogs />
    </div>
  );
}

// A distributed run: what adds up across ranks and what is rank 0's alone.
function RanksNote() {
  const ranks = useSelector(store, (s) => s.status?.stats?.ranks ?? 1);
  if (ranks <= 1) return null;
  return (
    <p class="stats-note" data-testid="stats-ranks">
      Statistics over all {ranks} ranks (the global batch). Min/Max patches and "Current batch" show rank 0's shard.
    </p>
  );
}

const NO_STATS =
  'No statistics yet: watch a layer (the eye on its card) or collect all layers in Settings; statistics are collected while training runs.';

function StatsEmpty({ layers, phase }: { layers: string[]; phase: string | null }) {
  const list = useSelector(statsStore, (s) => s.list);
  const loading = useSelector(statsStore, (s) => s.loading);
  const scope = useSelector(store, (s) => s.status?.stats?.scope ?? null);
  if (loading) return <div class="empty-hint" data-testid="stats-loading">Loading statistics…</div>;
  if (list?.layers.length) return null;
  const off = scope === 'none' ? ' Collection is off (Settings → Statistics collection).' : '';
  return (
    <div class="empty-hint stats-empty" data-testid="stats-empty">
      {NO_STATS}
      {off}
      {phase === null && layers.length > 0 && ' Meanwhile, "Current batch" shows the last captured batch of any layer.'}
    </div>
  );
}
