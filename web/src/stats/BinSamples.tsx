// Hovering a histogram bar: a few elements of that bin (of the channel shown,
// or the whole layer) from the last captured batch, each with the input crop
// around it ("bin samples").
import { useEffect, useState } from 'preact/hooks';
import * as api from '../api/client';
import type { BinSamples as BinSamplesReply, StripKind } from '../api/types';
import { formatNum } from '../format';
import { store } from '../state/app';
import { useSelector } from '../state/store';

const COUNT = 6;

export interface BinTarget {
  kind: StripKind;
  bin: number;
}

export function BinSamples(props: { layer: string; kind: StripKind; channel: number | null; bin: number }) {
  const { layer, kind, channel, bin } = props;
  const snapshot = useSelector(store, (s) => s.status?.snapshot_sequence ?? 0);
  const [reply, setReply] = useState<BinSamplesReply | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    const abort = new AbortController();
    setError(null);
    api
      .getBinSamples({ layer, kind, bin, count: COUNT, ...(channel === null ? {} : { channel }) }, abort.signal)
      .then(setReply, (e: Error) => {
        if (e.name === 'AbortError') return;
        setReply(null);
        setError(e.message);
      });
    return () => abort.abort();
  }, [layer, kind, channel, bin, snapshot]);

  const where = channel === null ? 'the layer' : `channel ${channel}`;
  return (
    <div class="bin-samples" data-testid={`bin-samples-${layer}-${kind}`} data-bin={bin} data-matches={reply?.matches ?? 0}>
      {error && <p class="stats-note">{error}</p>}
      {reply && (
        <>
          <p class="stats-note">
            Bin {bin} [{formatNum(reply.range[0] ?? null, 3)}, {formatNum(reply.range[1] ?? null, 3)}) of {where}:{' '}
            {reply.matches === 0
              ? `no ${kind} value of the last captured batch (${reply.position.text}) falls here.`
              : `${reply.samples.length} of ${reply.matches} values in the last captured batch (${reply.position.text}).`}
            {reply.note && ` ${reply.note}.`}
          </p>
          <div class="bin-sample-row">
            {reply.samples.map((s) => (
              <figure class="bin-sample" key={`${s.sample}|${s.index.join(',')}`} data-testid="bin-sample">
                {s.png ? (
                  <img class="pixelated" src={`data:image/png;base64,${s.png}`} alt={`sample ${s.sample}`} />
                ) : (
                  <div class="bin-sample-none">no crop</div>
                )}
                <figcaption class="mono">
                  s{s.sample} [{s.index.join(',')}]
                  <br />
                  {formatNum(s.value, 4)}
                </figcaption>
              </figure>
            ))}
          </div>
        </>
      )}
    </div>
  );
}
