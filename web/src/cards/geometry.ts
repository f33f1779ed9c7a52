// Predicts a strip's picture from the tensor's shape, mirroring the server's
// renderer (src/render/strip.cpp), so every strip is sized before its image
// arrives and loading never shifts the layout.

export type StripLayout = 'channels' | 'features' | 'tokens' | 'matrix' | 'scalar';

export interface StripGeometry {
  layout: StripLayout;
  tiles: number;
  tileWidth: number;
  tileHeight: number;
  // Source image size (tiles in one row, 1 px transparent gap between them).
  width: number;
  height: number;
  // On-screen size of one source pixel.
  scaleX: number;
  scaleY: number;
}

const TARGET_TILE_PX = 64;
const LARGEST_TILE_PX = 128;
const FEATURE_ROW_PX = 18;
const FEATURE_ROW_WIDTH_PX = 720;

// Bool and integer tensors (masks, token ids, labels) are drawn as values,
// never averaged; complex ones are not drawn.
export function isValueDtype(dtype: string | undefined): boolean {
  return dtype != null && (dtype === 'bool' || /^u?int\d+$/.test(dtype));
}

// `shape` includes the batch dimension. Null: the server cannot draw it.
export function stripGeometry(shape: number[], average: boolean, dtype?: string): StripGeometry | null {
  if (dtype?.startsWith('complex')) return null;
  if (isValueDtype(dtype)) average = false;
  const s = shape.slice(1);
  let layout: StripLayout;
  let tiles: number;
  let h: number;
  let w: number;
  if (s.length === 0) {
    [layout, tiles, h, w] = ['scalar', 1, 1, 1];
  } else if (s.length === 1) {
    [layout, tiles, h, w] = ['features', 1, 1, s[0]!];
  } else if (s.length === 2) {
    const side = Math.round(Math.sqrt(s[0]!));
    if (side * side === s[0] && s[0]! > 1) [layout, tiles, h, w] = ['tokens', s[1]!, side, side];
    else [layout, tiles, h, w] = ['matrix', 1, s[0]!, s[1]!];
  } else if (s.length === 3) {
    [layout, tiles, h, w] = ['channels', s[0]!, s[1]!, s[2]!];
  } else {
    return null;
  }
  if (average && tiles > 1) tiles = 1;
  const width = tiles * w + (tiles - 1);
  let scaleX: number;
  let scaleY: number;
  if (h === 1) {
    // A feature vector: a row of cells, wide enough to see each one.
    scaleX = Math.max(2, Math.min(12, Math.floor(FEATURE_ROW_WIDTH_PX / Math.max(1, width))));
    scaleY = FEATURE_ROW_PX;
  } else if (h > LARGEST_TILE_PX) {
    scaleX = scaleY = LARGEST_TILE_PX / h;
  } else {
    scaleX = scaleY = Math.max(1, Math.floor(TARGET_TILE_PX / h));
  }
  return { layout, tiles, tileWidth: w, tileHeight: h, width, height: h, scaleX, scaleY };
}

export function shapeText(shape: readonly number[]): string {
  return shape.length ? shape.join('×') : 'scalar';
}
