// Colours of the Stats page: one per phase (those of the original NaNsense
// 0.4.0, Python on PyPI, for train, val and test), one per statistic.
const PHASES: Record<string, string> = { train: '#d97706', val: '#3b82f6', test: '#10b981' };
const PALETTE = ['#e879f9', '#f43f5e', '#a3e635', '#22d3ee', '#facc15', '#fb923c'];

// Phases outside train/val/test take palette colours by their order on the page.
export function phaseColor(phase: string, order: string[]): string {
  const known = PHASES[phase];
  if (known) return known;
  const others = order.filter((p) => !(p in PHASES));
  return PALETTE[Math.max(0, others.indexOf(phase)) % PALETTE.length]!;
}

export const CURRENT_COLOR = '#e6e9ef';

export const STAT_COLORS = {
  mean: '#f0b429',
  std: '#a78bfa',
  median: '#34d399',
  min: '#4c9aff',
  max: '#f87171',
  dead: '#9aa5b4',
} as const;
