// A card's buttons to the pages about its layer: Weights (layers that own
// parameters), Experiment (every layer but an input) and Stats. Real links
// (middle-click opens a tab) that take the layer as ?layer=.
import type { Layer } from '../api/types';
import { pageHref, type Page } from '../links';

interface LinkSpec {
  page: Page;
  title: string;
  label: string;
  icon: string;
}

function specs(layer: Layer): LinkSpec[] {
  const name = layer.name;
  const out: LinkSpec[] = [];
  if (layer.parameters.length > 0) {
    const n = layer.parameters.length;
    out.push({
      page: 'weights',
      title: `This layer's weights (${n}): values, gradients and optimizer state`,
      label: `Weights of ${name}`,
      icon: 'M3 3h8v8H3V3zm10 0h8v8h-8V3zM3 13h8v8H3v-8zm10 0h8v8h-8v-8z',
    });
  }
  if (layer.role !== 'input') {
    out.push({
      page: 'experiment',
      title: `Experiment on ${name}: Deep Dream, Grad-CAM, attributions`,
      label: `Experiment on ${name}`,
      icon: 'M9 2v2h1v5.2L4.3 19A2 2 0 0 0 6 22h12a2 2 0 0 0 1.7-3L14 9.2V4h1V2H9zm3 2v5.8l2.3 4.2H9.7L12 9.8V4z',
    });
  }
  out.push({
    page: 'stats',
    title: `Statistics of ${name} over time`,
    label: `Statistics of ${name}`,
    icon: 'M4 20h16v-2H4v2zm1-4h3V9H5v7zm5 0h3V4h-3v12zm5 0h3v-5h-3v5z',
  });
  return out;
}

export function CardLinks({ layer }: { layer: Layer }) {
  return (
    <span class="card-links" data-tour="card-links">
      {specs(layer).map((s) => (
        <a
          key={s.page}
          class={`icon-button card-link card-${s.page}-link`}
          data-testid={`${s.page}-link-${layer.name}`}
          href={pageHref(s.page, { layer: layer.name })}
          title={s.title}
          aria-label={s.label}
          onClick={(e) => e.stopPropagation()}
        >
          <svg viewBox="0 0 24 24" width="15" height="15" aria-hidden="true">
            <path fill="currentColor" d={s.icon} />
          </svg>
        </a>
      ))}
    </span>
  );
}
