// The colour scale of one strip and its non-finite counts. NaN and ±Inf are
// drawn as marks outside the scale, so they are counted here, not read off it.
import type { StripInfo } from '../api/types';
import { formatCount, formatNum } from '../format';

export function Legend({ info }: { info: StripInfo | null }) {
  if (!info) return <div class="legend legend-empty" />;
  if (info.scale === 'boolean') return <BooleanLegend info={info} />;
  if (info.scale === 'categorical') return <CategoricalLegend info={info} />;
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

// A mask: which colour is true, and how many of the sample's values are.
function BooleanLegend({ info }: { info: StripInfo }) {
  const total = info.tiles * info.tile_width * info.tile_height;
  return (
    <div class="legend legend-values mono" data-testid={`legend-${info.kind}-${info.layer}`} data-scale="boolean">
      <span class="value-key" title="true">
        <i class="swatch swatch-true" />
        true {formatCount(info.true_count ?? 0)}
      </span>
      <span class="value-key" title="false">
        <i class="swatch swatch-false" />
        false {formatCount(Math.max(0, total - (info.true_count ?? 0)))}
      </span>
    </div>
  );
}

// Ids and labels: one colour per value (0 gray), so the legend gives the
// range and how many distinct values the sample holds.
function CategoricalLegend({ info }: { info: StripInfo }) {
  return (
    <div
      class="legend legend-values mono"
      data-testid={`legend-${info.kind}-${info.layer}`}
      data-scale="categorical"
      title={`${info.dtype} values, a colour per value (the same value has the same colour in every strip; 0 is gray)`}
    >
      <span>{info.dtype}</span>
      <span>
        {info.value_min ?? '–'}…{info.value_max ?? '–'}
      </span>
      <span>{formatCount(info.distinct ?? 0)} distinct</span>
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
