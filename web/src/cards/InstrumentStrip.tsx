// A layer-tensor instrument's strip (Session::watch_layer_tensor): an extra
// row under the card's activation and gradient, laid out like the activation
// (the output has its shape), fetched for the snapshot the page shows while
// the card is on screen.
import { useEffect, useState } from 'preact/hooks';
import { pngUrl, renderInstrumentStrip, SnapshotReplaced } from '../api/client';
import type { InstrumentStripInfo, Values } from '../api/types';
import type { StripGeometry } from './geometry';

interface Props {
  layer: string;
  instrument: string;
  row: number; // the card grid's row
  geometry: StripGeometry | null;
  sequence: number;
  sample: number;
  average: boolean;
  values: Values;
  visible: boolean;
}

export function InstrumentLabel({ instrument, row }: { instrument: string; row: number }) {
  return (
    <div class="strip-label strip-instrument" style={{ gridRow: String(row) }}>
      <span class="strip-marker" title={`watch_layer_tensor("${instrument}")`}>
        {instrument}
      </span>
    </div>
  );
}

export function InstrumentCell({ layer, instrument, row, geometry: g, sequence, sample, average, values, visible }: Props) {
  const [drawn, setDrawn] = useState<{ url: string; info: InstrumentStripInfo } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (!visible || sequence <= 0) return;
    const abort = new AbortController();
    renderInstrumentStrip({ layer, instrument, sample, average, values }, sequence, abort.signal)
      .then((r) => {
        setDrawn({ url: pngUrl(r.png), info: r.info });
        setError(null);
      })
      .catch((e: unknown) => {
        if (abort.signal.aborted || e instanceof SnapshotReplaced) return;
        setError(e instanceof Error ? e.message : String(e));
      });
    return () => abort.abort();
  }, [layer, instrument, sample, average, values, sequence, visible]);

  const id = `strip-instrument-${instrument}-${layer}`;
  const scaleX = g?.scaleX ?? 1;
  const scaleY = g?.scaleY ?? 1;
  return (
    <div class="strip-cell strip-instrument" style={{ gridRow: String(row) }}>
      {error ? (
        <div class="strip-absent" data-testid={id} data-state="absent">
          {error}
        </div>
      ) : drawn ? (
        <div class="strip-canvas">
          <div class="strip-frame" style={{ width: `${drawn.info.width * scaleX}px` }}>
            <img
              data-testid={id}
              data-sequence={drawn.info.sequence}
              src={drawn.url}
              width={Math.round(drawn.info.width * scaleX)}
              height={Math.round(drawn.info.height * scaleY)}
              alt={`${instrument} of ${layer}, sample ${sample}`}
              style={{ display: 'block', imageRendering: 'pixelated' }}
            />
          </div>
        </div>
      ) : (
        <div class="strip-absent" data-state="loading" />
      )}
    </div>
  );
}
