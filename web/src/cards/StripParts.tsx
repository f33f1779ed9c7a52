// The two halves of a strip row: its label (marker, legend, non-finite
// counts) in the card's fixed column, and its picture in the card's shared
// horizontal scroller, so the channels of both strips line up.
import type { StripKind } from '../api/types';
import { captionImage, CAPTION_HEIGHT_PX, hasCaptions } from './captions';
import type { StripGeometry } from './geometry';
import { Legend } from './Legend';
import type { StripState } from './useStrip';

const LABELS: Record<StripKind, string> = { activation: 'ACTIVATIONS', gradient: 'GRADIENTS' };

export function StripLabel({ kind, state, message }: { kind: StripKind; state: StripState; message: string | null }) {
  return (
    <div class={`strip-label strip-${kind}`}>
      <span class="strip-marker">{LABELS[kind]}</span>
      {!message && <Legend info={state.picture?.info ?? null} />}
    </div>
  );
}

interface ViewProps {
  layer: string;
  kind: StripKind;
  geometry: StripGeometry | null;
  state: StripState;
  message: string | null;
  sample: number;
}

export function StripView({ layer, kind, geometry: g, state, message, sample }: ViewProps) {
  if (message || !g) {
    return (
      <div class={`strip-cell strip-${kind}`}>
        <div class="strip-absent" data-testid={`strip-${kind}-${layer}`} data-state="absent">
          {message}
        </div>
      </div>
    );
  }
  const width = Math.round(g.width * g.scaleX);
  const height = Math.round(g.height * g.scaleY);
  const { picture, stale } = state;
  return (
    <div class={`strip-cell strip-${kind}`}>
      <div class="strip-canvas" style={{ width: `${width}px` }}>
        {hasCaptions(g) && (
          <div
            class="strip-captions"
            style={{ height: `${CAPTION_HEIGHT_PX}px`, backgroundImage: `url(${captionImage(g, width)})` }}
          />
        )}
        <div class={`strip-frame ${stale ? 'stale' : ''}`} style={{ width: `${width}px`, height: `${height}px` }}>
          {picture && (
            <img
              data-testid={`strip-${kind}-${layer}`}
              data-sequence={picture.info.sequence}
              src={picture.url}
              width={width}
              height={height}
              alt={`${kind} of ${layer}, sample ${sample}`}
              draggable={false}
              onMouseMove={(e) => tileTitle(e, g)}
            />
          )}
        </div>
      </div>
    </div>
  );
}

// Names the tile under the pointer without re-rendering the card.
function tileTitle(e: MouseEvent, g: StripGeometry): void {
  const img = e.currentTarget as HTMLImageElement;
  const tile = Math.min(g.tiles - 1, Math.floor(e.offsetX / g.scaleX / (g.tileWidth + 1)));
  const noun = g.layout === 'channels' ? 'channel' : g.layout === 'tokens' ? 'feature' : 'tile';
  const title = g.tiles > 1 ? `${noun} ${tile}` : '';
  if (img.title !== title) img.title = title;
}
