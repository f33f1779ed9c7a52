// The Graphs view's logged scalars and metric instruments: one chart per
// series (x = epoch fraction), and the instruments that failed.
import { statsStore } from '../state/stats';
import { useSelector } from '../state/store';
import { Chart } from './Chart';
import { phaseColor } from './colors';
import { metricSpec } from './specs';

export function MetricsSection({ layers }: { layers: string[] }) {
  const metrics = useSelector(statsStore, (s) => s.metrics);
  const logY = useSelector(statsStore, (s) => s.logY);
  const retain = useSelector(statsStore, (s) => s.retain);
  if (!metrics) return null;
  const series = metrics.series.filter((m) => m.layer === '' || layers.includes(m.layer));
  const phases = [...new Set(series.map((m) => m.phase))];
  return (
    <section class="card stats-card" data-testid="metrics-section">
      <header class="card-header stats-card-header">
        <span class="card-name">Logged scalars and metrics</span>
      </header>
      <div class="stats-card-body">
        {series.length === 0 && (
          <p class="stats-note">
            Nothing logged yet: call <span class="mono">session.log_scalar(name, value)</span> in the loop, or register a
            metric with <span class="mono">watch_metric</span>.
          </p>
        )}
        {series.map((m) => {
          const id = [m.name, m.phase, m.layer].filter(Boolean).join('-');
          const title = `${m.name} · ${m.phase}${m.layer ? ` · ${m.layer}` : ''}`;
          return <Chart key={id} spec={metricSpec(`chart-metric-${id}`, title, m, phaseColor(m.phase, phases), logY, retain)} />;
        })}
        {metrics.failed.map((f) => (
          <p class="stats-note error-text" key={f.name} data-testid="metric-failed">
            {f.name} was disabled: {f.error}
          </p>
        ))}
      </div>
    </section>
  );
}
