// Channel numbers over a strip's tiles, drawn once per strip geometry into
// an image used as a background: hundreds of positioned labels per card
// made every scrolled frame re-lay them out.
import type { StripGeometry } from './geometry';

const HEIGHT_PX = 14;
const cache = new Map<string, string>();

export const CAPTION_HEIGHT_PX = HEIGHT_PX;
// Channel numbers need room; dense strips go without.
const MIN_CAPTIONED_TILE_PX = 22;
const MAX_CAPTIONS = 512;

export function hasCaptions(g: StripGeometry): boolean {
  return (
    (g.layout === 'channels' || g.layout === 'tokens') &&
    g.tiles > 1 &&
    g.tiles <= MAX_CAPTIONS &&
    g.tileWidth * g.scaleX >= MIN_CAPTIONED_TILE_PX
  );
}

export function captionImage(g: StripGeometry, width: number): string {
  const dpr = Math.max(1, Math.min(3, window.devicePixelRatio || 1));
  const key = `${g.tiles}|${g.tileWidth}|${g.scaleX}|${width}|${dpr}`;
  const hit = cache.get(key);
  if (hit) return hit;
  const canvas = document.createElement('canvas');
  canvas.width = Math.ceil(width * dpr);
  canvas.height = HEIGHT_PX * dpr;
  const ctx = canvas.getContext('2d');
  if (!ctx) return '';
  ctx.scale(dpr, dpr);
  const styles = getComputedStyle(document.documentElement);
  ctx.fillStyle = styles.getPropertyValue('--faint').trim() || '#6f7b8b';
  ctx.font = `9.5px ${styles.getPropertyValue('--mono')}`;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'middle';
  const pitch = (g.tileWidth + 1) * g.scaleX;
  const tile = g.tileWidth * g.scaleX;
  for (let i = 0; i < g.tiles; i++) ctx.fillText(String(i), i * pitch + tile / 2, HEIGHT_PX / 2);
  const url = canvas.toDataURL('image/png');
  cache.set(key, url);
  return url;
}
