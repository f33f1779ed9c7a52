// Number formatting shared by legends, tooltips and stats.
import type { Num } from './api/types';

export function formatNum(v: Num | null | undefined, digits = 3): string {
  if (v == null) return '—';
  if (v === 'nan') return 'NaN';
  if (v === 'inf') return '+Inf';
  if (v === '-inf') return '−Inf';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e4 || a < 1e-3) return v.toExponential(digits - 1).replace('e+', 'e');
  return String(Number(v.toPrecision(digits)));
}

export function formatCount(n: number): string {
  if (n < 1e3) return String(n);
  if (n < 1e6) return `${Number((n / 1e3).toPrecision(3))}k`;
  if (n < 1e9) return `${Number((n / 1e6).toPrecision(3))}M`;
  return `${Number((n / 1e9).toPrecision(3))}G`;
}
