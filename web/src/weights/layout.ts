// Dimension roles of a weight strip, as the server lays them out
// (src/render/weight_strip.h): X across a tile, Y down it, Tile (one tile per
// index, in a row) and Index (held at one index). Choosing a role for a
// dimension demotes the dimension that held it to Index.
import type { WeightLayout } from '../api/types';

export type Role = 'x' | 'y' | 'tile' | 'index';

const KEY = { x: 'x_dim', y: 'y_dim', tile: 'tile_dim' } as const;

export function roleOf(layout: WeightLayout, dim: number): Role {
  if (layout.x_dim === dim) return 'x';
  if (layout.y_dim === dim) return 'y';
  if (layout.tile_dim === dim) return 'tile';
  return 'index';
}

// The roles a tensor of `rank` dimensions offers: X for a vector, then Y,
// then Tile; Index whenever there is more than one dimension to place.
export function rolesFor(rank: number): Role[] {
  const roles: Role[] = ['x'];
  if (rank >= 2) roles.push('y');
  if (rank >= 3) roles.push('tile');
  if (rank >= 2) roles.push('index');
  return roles;
}

export const ROLE_LABEL: Record<Role, string> = { x: 'X', y: 'Y', tile: 'Tile', index: 'Index' };

// `layout` with `dim` given `role`: the dimension leaves the role it held,
// and the role's old holder becomes an Index.
export function withRole(layout: WeightLayout, dim: number, role: Role): WeightLayout {
  const next: WeightLayout = { ...layout, index: [...layout.index] };
  for (const key of Object.values(KEY)) if (next[key] === dim) next[key] = null;
  if (role !== 'index') next[KEY[role]] = dim;
  return next;
}

export function withIndex(layout: WeightLayout, dim: number, index: number): WeightLayout {
  const next: WeightLayout = { ...layout, index: [...layout.index] };
  next.index[dim] = index;
  return next;
}

export const sameShape = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((n, i) => n === b[i]);
