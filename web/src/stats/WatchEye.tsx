// The eye on a layer card (main page and Stats page): watch or unwatch the
// layer; it shows what the status says.
import { store } from '../state/app';
import { setWatched } from '../state/stats';
import { useSelector } from '../state/store';

// The eye: collect statistics for this layer (the watched scope's layers).
export function WatchEye({ layer, watched }: { layer: string; watched: boolean }) {
  const scope = useSelector(store, (s) => s.status?.stats?.scope ?? null);
  const locked = useSelector(store, (s) => s.status?.locked ?? false);
  // A recording that shows this layer's statistics keeps it watched.
  const fixed = useSelector(store, (s) => s.status?.fixed?.[`watched:${layer}`] ?? null);
  // A locked session collects every layer; watching is shared state, refused.
  if (locked) return null;
  const note = scope === 'none' ? ' (collection is off: Settings → Statistics collection)' : scope === 'all' ? ' (every layer is collected now: scope "all")' : '';
  const held = watched && fixed != null;
  const title = held
    ? `Watching ${layer}; ${fixed}`
    : `${watched ? 'Stop watching' : 'Watch'} ${layer}: ${watched ? 'no more statistics for it' : 'collect its statistics while training runs'}${note}`;
  return (
    <button
      class={`icon-button watch-eye ${watched ? 'watching' : ''}`}
      data-testid={`watch-${layer}`}
      data-watched={watched ? 'true' : 'false'}
      aria-pressed={watched}
      disabled={held}
      data-fixed={held ? 'true' : undefined}
      title={title}
      aria-label={title}
      onClick={(e) => {
        e.stopPropagation();
        void setWatched(layer, !watched);
      }}
    >
      <svg viewBox="0 0 24 24" width="16" height="16" aria-hidden="true">
        <path
          fill="currentColor"
          d={
            watched
              ? 'M12 4.5C7 4.5 2.73 7.61 1 12c1.73 4.39 6 7.5 11 7.5s9.27-3.11 11-7.5c-1.73-4.39-6-7.5-11-7.5zM12 17a5 5 0 1 1 0-10 5 5 0 0 1 0 10zm0-8a3 3 0 1 0 0 6 3 3 0 0 0 0-6z'
              : 'M12 6.5c3.79 0 7.17 2.13 8.82 5.5-1.65 3.37-5.03 5.5-8.82 5.5S4.83 15.37 3.18 12C4.83 8.63 8.21 6.5 12 6.5m0-2C7 4.5 2.73 7.61 1 12c1.73 4.39 6 7.5 11 7.5s9.27-3.11 11-7.5c-1.73-4.39-6-7.5-11-7.5zm0 5a2.5 2.5 0 1 1 0 5 2.5 2.5 0 0 1 0-5m0-2c-2.48 0-4.5 2.02-4.5 4.5s2.02 4.5 4.5 4.5 4.5-2.02 4.5-4.5-2.02-4.5-4.5-4.5z'
          }
        />
      </svg>
    </button>
  );
}
