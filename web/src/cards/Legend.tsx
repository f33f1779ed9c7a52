// The colour scale of one strip and its non-finite counts. NaN and ±Inf are
// drawn as marks outside the scale, so they are counted here, not read off it.
import type { StripInfo } from '../api/types';
import { formatCount, formatNum } from '../format';

export function Legend({ info }: { info: StripInfo | null }) {
  if (!info) return <div class="legend legend-empty" />;
  const diverging = info.scale === 'diverging';
  const max = info.scale_max;
  return (
    <div class="legend">
      <div class={`legend-bar ${diverging ? 'diverging' : 'sequential'}`} />
      <div class="legend-ticks mono">
        <span>{diverging ? (typeof max === 'number' ? formatNum(-max) : '−') : '0'}</span>
        {diverging && <span>0</span>}
        <span>{typeof max === 'number' && diverging ? `+${formatNum(max)}` : formatNum(max)}</span>
      </div>
      <NonFinite info={info} />
    </div>
  );
}

function NonFinite({ info }: { info: StripInfo }) {
  if (!info.nan && !info.pos_inf && !info.neg_inf) return null;
  return (
    <div class="nonfinite mono" data-testid={`nonfinite-${info.kind}-${info.layer}`}>
      {info.nan > 0 && (
        <span class="nf-chip" title="NaN values (magenta/black checker in the image)">
          <i class="swatch swatch-nan" />
          NaN {formatCount(info.nan)}
        </span>
      )}
      {info.pos_inf > 0 && (
        <span class="nf-chip" title="+Inf values (yellow in the image)">
          <i class="swatch swatch-posinf" />
          +Inf {formatCount(info.pos_inf)}
        </span>
      )}
      {info.neg_inf > 0 && (
        <span class="nf-chip" title="−Inf values (green in the image)">
          <i class="swatch swatch-neginf" />
          −Inf {formatCount(info.neg_inf)}
        </span>
      )}
    </div>
  );
}

// The key for the marks, shown once above the cards.
export function NonFiniteKey() {
  return (
    <div class="nf-key" title="How non-finite values are drawn in every strip">
      <span>
        <i class="swatch swatch-nan" />
        NaN
      </span>
      <span>
        <i class="swatch swatch-posinf" />
        +Inf
      </span>
      <span>
        <i class="swatch swatch-neginf" />
        −Inf
      </span>
    </div>
  );
}
