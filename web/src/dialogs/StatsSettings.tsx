// The gear dialog's statistics sections: which layers collect, how much
// per-channel detail they keep, and how often a running loop publishes a
// batch. Each change applies at once; the server validates, and its refusal
// is shown beside the field.
import { useEffect, useState } from 'preact/hooks';
import * as api from '../api/client';
import type { Settings, StatsScope, UpdateFrequency } from '../api/types';
import { store, toast } from '../state/app';
import { useSelector } from '../state/store';

const SCOPES: { value: StatsScope; label: string }[] = [
  { value: 'none', label: 'No layers (collection off)' },
  { value: 'watched', label: 'Watched layers (the eye on a card)' },
  { value: 'all', label: 'All layers' },
];

const UNITS: { value: UpdateFrequency['unit']; label: string }[] = [
  { value: 'batch', label: 'Every n batches' },
  { value: 'epoch', label: 'Every n epochs' },
  { value: 'seconds', label: 'Every n seconds' },
];

type Section = 'scope' | 'performance' | 'frequency';

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

// The settings as the server last answered, the numbers as typed, and each
// section's refusal or "Saved".
interface StatsSettingsState {
  settings: Settings | null;
  loadError: string | null;
  errors: Partial<Record<Section, string>>;
  saved: Section | null;
  // Typed text, kept until applied so a half-typed number is not rewritten.
  typed: Typed;
  // Sends one section's change; the server's answer replaces the settings.
  apply: (section: Section, call: () => Promise<Settings>) => Promise<void>;
}

interface Typed {
  n: string;
  setN: (v: string) => void;
  limit: string;
  setLimit: (v: string) => void;
  sample: string;
  setSample: (v: string) => void;
  perChannel: string;
  setPerChannel: (v: string) => void;
}

function useStatsSettings(): StatsSettingsState {
  const [settings, setSettings] = useState<Settings | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [errors, setErrors] = useState<Partial<Record<Section, string>>>({});
  const [saved, setSaved] = useState<Section | null>(null);
  const [n, setN] = useState('');
  const [limit, setLimit] = useState('');
  const [sample, setSample] = useState('');
  const [perChannel, setPerChannel] = useState('');

  const adopt = (next: Settings) => {
    setSettings(next);
    setN(String(next.update_frequency.n));
    setLimit(String(next.watch_performance.channel_limit));
    setSample(String(next.watch_performance.histogram_sample));
    setPerChannel(String(next.watch_performance.samples_per_channel));
  };

  useEffect(() => {
    const abort = new AbortController();
    api.getSettings(abort.signal).then(adopt, (e: Error) => {
      if (e.name !== 'AbortError') setLoadError(e.message);
    });
    return () => abort.abort();
  }, []);

  const apply = async (section: Section, call: () => Promise<Settings>) => {
    setErrors((x) => ({ ...x, [section]: undefined }));
    setSaved(null);
    try {
      const next = await call();
      adopt(next);
      setSaved(section);
      if (next.statistics_flushed) toast('Layer statistics flushed: the new channel settings start from empty (logged scalars stay)', 'info');
    } catch (e) {
      setErrors((x) => ({ ...x, [section]: message(e) }));
    }
  };

  const typed = { n, setN, limit, setLimit, sample, setSample, perChannel, setPerChannel };
  return { settings, loadError, errors, saved, typed, apply };
}

export function StatsSettings() {
  const phases = useSelector(store, (s) => s.status?.schedule.phases.map((p) => p.name) ?? []);
  // What the active recordings fix, with the server's reason (it refuses
  // the same changes with the same words).
  const fixed = useSelector(store, (s) => s.status?.fixed ?? {});
  const state = useStatsSettings();
  const { settings, loadError } = state;

  if (loadError) return <p class="form-error">Could not load the statistics settings: {loadError}</p>;
  if (!settings) return <p class="form-note">Loading…</p>;
  const sections = { ...state, settings };
  return (
    <div class="settings-sections" data-testid="stats-settings">
      <ScopeSection {...sections} fixed={fixed.stats_scope ?? null} />
      <PerformanceSection {...sections} fixed={fixed.watch_performance ?? null} />
      <FrequencySection {...sections} phases={phases} fixed={fixed.update_frequency ?? null} />
    </div>
  );
}

// `fixed`: why an active recording holds the section's setting (null when
// none does); its controls are disabled with that title.
type SectionProps = StatsSettingsState & { settings: Settings; fixed: string | null };

function ScopeSection({ settings, errors, saved, apply, fixed }: SectionProps) {
  return (
    <section class="settings-section" data-fixed={fixed != null ? "true" : undefined}>
      <h3>Statistics collection</h3>
      <Fixed reason={fixed} testid="stats-scope-fixed" />
      <label class="settings-row" title={fixed ?? undefined}>
        <span>Collect for</span>
        <select
          data-testid="stats-scope"
          class="settings-wide"
          disabled={fixed != null}
          value={settings.stats_scope}
          onChange={(e) => void apply('scope', () => api.setStatsScope(e.currentTarget.value as StatsScope))}
        >
          {SCOPES.map((s) => (
            <option key={s.value} value={s.value}>
              {s.label}
            </option>
          ))}
        </select>
      </label>
      <p class="form-hint">
        {settings.stats_collecting ? 'Collecting' : 'Not collecting'}; watched:{' '}
        <span class="mono">{settings.watched_layers.length ? settings.watched_layers.join(', ') : 'none'}</span>
      </p>
      <Feedback error={errors.scope} saved={saved === 'scope'} testid="stats-scope" />
    </section>
  );
}

function PerformanceSection({ settings, errors, saved, apply, typed, fixed }: SectionProps) {
  const perf = settings.watch_performance;
  const { limit, setLimit, sample, setSample, perChannel, setPerChannel } = typed;
  return (
    <section class="settings-section" data-fixed={fixed != null ? "true" : undefined}>
      <h3>Performance</h3>
      <Fixed reason={fixed} testid="performance-fixed" />
      <fieldset class="settings-group" disabled={fixed != null} title={fixed ?? undefined}>
      <label class="switch-row">
        <input
          type="checkbox"
          data-testid="channel-limit-enabled"
          checked={perf.channel_limit_enabled}
          onChange={(e) => {
            const on = e.currentTarget.checked;
            void apply('performance', () => api.setWatchPerformance({ channel_limit_enabled: on }));
          }}
        />
        <span>Limit recorded channels</span>
      </label>
      <label class="settings-row">
        <span>Channels</span>
        <input
          type="number"
          min={1}
          step={1}
          data-testid="channel-limit"
          disabled={!perf.channel_limit_enabled}
          value={limit}
          onInput={(e) => setLimit(e.currentTarget.value)}
          onChange={(e) => {
            const v = Number(e.currentTarget.value.trim());
            void apply('performance', () => api.setWatchPerformance({ channel_limit: v }));
          }}
        />
        <span class="form-hint">per-channel histograms kept per layer</span>
      </label>
      <label class="settings-row">
        <span>Histogram sample</span>
        <input
          type="number"
          min={0}
          step={1024}
          data-testid="histogram-sample"
          value={sample}
          onInput={(e) => setSample(e.currentTarget.value)}
          onChange={(e) => {
            const v = Number(e.currentTarget.value.trim());
            void apply('performance', () => api.setWatchPerformance({ histogram_sample: v }));
          }}
        />
        <span class="form-hint">values per tensor a CPU histogram counts (0 = all); n, mean, std, min, max stay exact</span>
      </label>
      <label class="settings-row">
        <span>Samples per channel</span>
        <input
          type="number"
          min={0}
          max={64}
          step={1}
          data-testid="samples-per-channel"
          value={perChannel}
          onInput={(e) => setPerChannel(e.currentTarget.value)}
          onChange={(e) => {
            const v = Number(e.currentTarget.value.trim());
            void apply('performance', () => api.setWatchPerformance({ samples_per_channel: v }));
          }}
        />
        <span class="form-hint">inputs a Min/Max gallery keeps per channel (0 = patches off)</span>
      </label>
      <label class="switch-row">
        <input
          type="checkbox"
          data-testid="average-patches"
          checked={perf.average_patches}
          onChange={(e) => {
            const on = e.currentTarget.checked;
            void apply('performance', () => api.setWatchPerformance({ average_patches: on }));
          }}
        />
        <span>Average-extreme patches (whole inputs ranked by a channel's mean; more memory)</span>
      </label>
      </fieldset>
      <p class="form-hint settings-warn">Changing these clears the layer statistics collected so far (logged scalars and metrics stay).</p>
      <Feedback error={errors.performance} saved={saved === 'performance'} testid="performance" />
    </section>
  );
}

function FrequencySection({
  settings,
  errors,
  saved,
  apply,
  typed,
  phases,
  fixed,
}: SectionProps & { phases: string[] }) {
  const f = settings.update_frequency;
  const { n, setN } = typed;
  const setFrequency = (patch: Partial<UpdateFrequency>) => {
    const unit = patch.unit ?? f.unit;
    const value = Number((patch.n ?? n).toString().trim());
    const phase = unit === 'batch' ? (patch.phase !== undefined ? patch.phase : f.phase) : null;
    void apply('frequency', () => api.setUpdateFrequency({ unit, n: value, phase }));
  };
  return (
    <section class="settings-section" data-fixed={fixed != null ? "true" : undefined}>
      <h3>Update frequency</h3>
      <p class="form-hint">While training runs, a batch is captured and published at this cadence, without pausing.</p>
      <Fixed reason={fixed} testid="update-frequency-fixed" />
      <fieldset class="settings-group" disabled={fixed != null} title={fixed ?? undefined}>
        <label class="settings-row">
          <span>Update</span>
          <select data-testid="update-unit" class="settings-wide" value={f.unit} onChange={(e) => setFrequency({ unit: e.currentTarget.value as UpdateFrequency['unit'] })}>
            {UNITS.map((u) => (
              <option key={u.value} value={u.value}>
                {u.label}
              </option>
            ))}
          </select>
        </label>
        <label class="settings-row">
          <span>n</span>
          <input
            type="number"
            min={f.unit === 'seconds' ? 0 : 1}
            step={f.unit === 'seconds' ? 'any' : 1}
            data-testid="update-n"
            value={n}
            onInput={(e) => setN(e.currentTarget.value)}
            onChange={(e) => setFrequency({ n: Number(e.currentTarget.value.trim()) })}
          />
          <span class="form-hint">{f.unit === 'seconds' ? 'seconds of training (> 0)' : `${f.unit === 'batch' ? 'batches' : 'epochs'} (a whole number ≥ 1)`}</span>
        </label>
        {f.unit === 'batch' && (
          <label class="settings-row">
            <span>Phase</span>
            <select data-testid="update-phase" class="settings-wide" value={f.phase ?? ''} onChange={(e) => setFrequency({ phase: e.currentTarget.value || null })}>
              <option value="">(any phase)</option>
              {[...new Set([...phases, ...(f.phase ? [f.phase] : [])])].map((p) => (
                <option key={p} value={p}>
                  {p}
                </option>
              ))}
            </select>
          </label>
        )}
      </fieldset>
      <Feedback error={errors.frequency} saved={saved === 'frequency'} testid="update-frequency" />
    </section>
  );
}

// Why a section's controls are disabled: an active recording shows what
// they would change (the Recording section below has Save & Finish and Delete).
function Fixed({ reason, testid }: { reason: string | null; testid: string }) {
  if (!reason) return null;
  return (
    <p class="form-note settings-fixed" data-testid={testid}>
      {reason.charAt(0).toUpperCase() + reason.slice(1)}.
    </p>
  );
}

function Feedback({ error, saved, testid }: { error: string | undefined; saved: boolean; testid: string }) {
  if (error) {
    return (
      <div class="form-error" role="alert" data-testid={`${testid}-error`}>
        {error}
      </div>
    );
  }
  return (
    <div class="form-hint settings-saved" data-testid={`${testid}-saved`} aria-live="polite">
      {saved ? 'Saved' : ''}
    </div>
  );
}
