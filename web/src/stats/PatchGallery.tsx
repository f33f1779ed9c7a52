// The Min/Max view of one layer: per channel (columns) the inputs that drove
// it highest or lowest this epoch, or in the last captured batch alone
// ("Current batch": any layer, watched or not), rows best first, as crops
// around where it peaked or as whole inputs ranked by its mean, with the
// channel's activation over them on request. Refetched with every statistics
// publish (the current batch's: every captured batch).
import { useEffect, useState } from 'preact/hooks';
import * as api from '../api/client';
import type { PatchCell, Patches, PatchGrid } from '../api/types';
import { formatNum } from '../format';
import { store } from '../state/app';
import { statsStore } from '../state/stats';
import { useSelector } from '../state/store';

const GRID_TITLE: Record<PatchGrid, string> = {
  max_pixel: 'max pixel',
  min_pixel: 'min pixel',
  max_average: 'max average',
  min_average: 'min average',
};

export function PatchGalleryBody({ layer, phase }: { layer: string; phase: string | null }) {
  const grid = useSelector(statsStore, (s) => s.grid);
  const heatmap = useSelector(statsStore, (s) => s.heatmap);
  const current = phase === null;
  // An epoch's gallery follows the statistics publishes, the current batch's
  // every captured batch (of any layer, watched or not).
  const sequence = useSelector(statsStore, (s) => s.list?.sequence ?? 0);
  const snapshotSequence = useSelector(store, (s) => (current ? s.sequence : 0));
  const hasStats = useSelector(statsStore, (s) => s.histories[layer] != null);
  const [data, setData] = useState<Patches | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (current ? snapshotSequence === 0 : !hasStats) return;
    const abort = new AbortController();
    const args = current ? { layer, current_batch: true, grid, heatmap } : { layer, phase, grid, heatmap };
    api.getPatches(args, abort.signal).then(
      (d) => {
        setData(d);
        setError(null);
        // The sidebar offers what this layer holds (the average grids only with them on).
        const known = statsStore.get().grids;
        if (d.grids.length && d.grids.join() !== known.join()) statsStore.set({ grids: d.grids });
      },
      (e: Error) => {
        if (e.name === 'AbortError') return;
        // An average grid after average patches were turned off: back to max pixel.
        if (e instanceof api.ApiError && e.status === 400 && grid !== 'max_pixel') {
          statsStore.set({ grid: 'max_pixel', grids: ['max_pixel', 'min_pixel'] });
          return;
        }
        setData(null);
        setError(e.message);
      },
    );
    return () => abort.abort();
  }, [layer, phase, grid, heatmap, current ? snapshotSequence : sequence, hasStats]);

  if (current && snapshotSequence === 0) return <p class="stats-note">No batch captured yet.</p>;
  if (!current && !hasStats) {
    return <p class="stats-note">No statistics for this layer yet: watch it (the eye) and let training run; its Min/Max patches fill as it does.</p>;
  }
  if (error) {
    return (
      <p class="stats-note" data-testid={`gallery-error-${layer}`}>
        {error}
      </p>
    );
  }
  if (!data) return <p class="stats-note">Loading the patches…</p>;
  if (data.cells.length === 0) {
    return (
      <p class="stats-note" data-testid={`gallery-note-${layer}`}>
        {data.note ?? 'No patches yet.'}
      </p>
    );
  }
  const rows = Array.from({ length: data.samples }, (_, a) => data.cells.filter((c) => c.slot === a));
  const filled = data.cells.filter((c) => c.filled).length;
  const average = data.grid === 'max_average' || data.grid === 'min_average';
  return (
    <>
      <p class="stats-note" data-testid={`gallery-caption-${layer}`}>
        {data.current_batch ? `current batch (${data.position ?? data.phase})` : `${data.phase} epoch ${data.epoch}`} ·{' '}
        {GRID_TITLE[data.grid]} ·{' '}
        {average ? 'whole inputs ranked by the channel mean' : `${data.crop.height}×${data.crop.width} input crops around the channel's ${data.grid === 'max_pixel' ? 'highest' : 'lowest'} value`}
        {heatmap && ' · activation over the input (red +, blue −)'}
      </p>
      {data.note && <p class="stats-note">{data.note}</p>}
      <div class="gallery-scroll">
        <table
          class="gallery"
          data-testid={`gallery-${layer}`}
          data-grid={data.grid}
          data-filled={filled}
          data-channels={data.channels}
          data-samples={data.samples}
        >
          <thead>
            <tr>
              <th />
              {Array.from({ length: data.channels }, (_, c) => (
                <th key={c} class="gallery-head">
                  CHANNEL {c}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {rows.map((cells, a) => (
              <tr key={a}>
                <th class="gallery-head">SAMPLE {a + 1}</th>
                {cells.map((cell) => (
                  <td key={cell.channel}>
                    <Cell cell={cell} />
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function Cell({ cell }: { cell: PatchCell }) {
  if (!cell.filled || !cell.png) return <div class="gallery-empty" title="Not filled yet" data-testid="gallery-empty" />;
  const title = `score ${formatNum(cell.score, 5)} · batch ${cell.batch}, sample ${cell.sample} · at (${cell.y}, ${cell.x}) · crop from (${cell.top}, ${cell.left})`;
  return (
    <figure class="gallery-cell" title={title} data-testid="gallery-cell" data-score={String(cell.score)}>
      <img class="pixelated" src={`data:image/png;base64,${cell.png}`} alt={title} />
      <figcaption class="mono">{formatNum(cell.score, 3)}</figcaption>
    </figure>
  );
}
