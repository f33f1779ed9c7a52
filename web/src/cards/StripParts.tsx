// The two halves of a strip row: its label (marker, legend, non-finite
// counts) in the card's fixed column, and its picture in the card's shared
// horizontal scroller, so the channels of both strips line up.
import { useLayoutEffect, useRef } from 'preact/hooks';
import type { StripKind } from '../api/types';
import { captionImage, CAPTION_HEIGHT_PX, hasCaptions } from './captions';
import type { StripGeometry } from './geometry';
import { Legend } from './Legend';
import type { Picture, StripState } from './useStrip';

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
            <StripCanvas
              testId={`strip-${kind}-${layer}`}
              picture={picture}
              width={width}
              height={height}
              label={`${kind} of ${layer}, sample ${sample}`}
              geometry={g}
            />
          )}
        </div>
      </div>
    </div>
  );
}

interface CanvasProps {
  testId: string;
  picture: Picture;
  width: number;
  height: number;
  label: string;
  geometry: StripGeometry;
}

// The picture at its own resolution, scaled up by CSS with hard pixel edges.
// A canvas takes the decoded bitmap as it is: no URL to load and decode again
// on the page's main thread.
function StripCanvas({ testId, picture, width, height, label, geometry }: CanvasProps) {
  const canvas = useRef<HTMLCanvasElement>(null);
  useLayoutEffect(() => {
    const c = canvas.current;
    if (!c) return;
    const { bitmap } = picture;
    if (c.width !== bitmap.width) c.width = bitmap.width;
    if (c.height !== bitmap.height) c.height = bitmap.height;
    const context = c.getContext('2d');
    if (!context) return;
    context.clearRect(0, 0, c.width, c.height);
    context.drawImage(bitmap, 0, 0);
    c.dataset.drawn = String(picture.info.sequence);
  }, [picture]);
  return (
    <canvas
      ref={canvas}
      data-testid={testId}
      data-sequence={picture.info.sequence}
      role="img"
      aria-label={label}
      style={{ width: `${width}px`, height: `${height}px` }}
      onMouseMove={(e) => tileTitle(e, geometry)}
    />
  );
}

// Names the tile under the pointer without re-rendering the card.
function tileTitle(e: MouseEvent, g: StripGeometry): void {
  const img = e.currentTarget as HTMLElement;
  const tile = Math.min(g.tiles - 1, Math.floor(e.offsetX / g.scaleX / (g.tileWidth + 1)));
  const noun = g.layout === 'channels' ? 'channel' : g.layout === 'tokens' ? 'feature' : 'tile';
  const title = g.tiles > 1 ? `${noun} ${tile}` : '';
  if (img.title !== title) img.title = title;
}
