// The bar on every page: run controls, where the loop is, and the link state.
import type { Status } from '../api/types';
import { pageHref, type Page } from '../links';
import { detach, pause, refresh, run, stepBy } from '../state/commands';
import { store, togglePane, type Connection, type PaneToggles } from '../state/app';
import { positionLabel, trainerStepLabel } from '../state/position';
import { useSelector } from '../state/store';
import { openShare } from '../share/ShareDialog';
import { startTour } from '../tour/Tour';
import { StepButton } from './StepButton';

export interface Controls {
  run: boolean;
  step: boolean;
  pause: boolean;
  detach: boolean;
  // Capture the next batch without pausing: only while it runs.
  refresh: boolean;
}

// Paused: go forward. Running: pause. Finished, lost or offline: nothing.
export function controlsFor(status: Status | null, connection: Connection): Controls {
  const live = connection !== 'closed' && status != null;
  const paused = live && status.state === 'paused';
  const running = live && status.state === 'running';
  return {
    run: paused,
    step: paused,
    pause: running,
    detach: paused || (running && status.mode !== 'detach'),
    refresh: running,
  };
}

// The bar on the main page and the Stats page: the same controls, and a link
// to the other page.
export function TopBar({ page }: { page: Page }) {
  const status = useSelector(store, (s) => s.status);
  const connection = useSelector(store, (s) => s.connection);
  const c = controlsFor(status, connection);
  const tt = status?.time_travel;
  const ttReason = tt?.available ? 'Jump back to a cached epoch' : (tt?.reason ?? 'Time travel is not available in this session');

  return (
    <header class="topbar">
      <Brand frontEnd={status?.front_end ?? null} />
      {status?.locked ? (
        <span
          class="chip chip-amber"
          data-testid="locked-chip"
          data-tour="locked"
          title="A shared, read-only session paused at a frozen moment: layers, statistics, weights and experiments work; training controls, watching and settings are locked"
        >
          locked — training controls disabled
        </span>
      ) : (
        <RunControls c={c} status={status} ttReason={ttReason} />
      )}
      <div class="where">
        <StateDot status={status} />
        {!status?.locked && (
          <PositionLabel status={status} />
        )}
        {status?.state === 'finished' && (
          <span class="chip chip-amber" data-testid="finished-chip">
            training finished
          </span>
        )}
      </div>
      <div class="toolbar-spacer" />
      {page === 'main' && <PaneToggle pane="architecture" />}
      {!status?.locked && <RefreshButton enabled={c.refresh} />}
      {page === 'main' && <PaneToggle pane="input" />}
      {page === 'main' ? (
        <a class="btn btn-quiet" data-testid="stats-link" data-tour="stats-link" href={pageHref('stats')} title="Statistics over time: histograms and graphs by epoch">
          Stats
        </a>
      ) : (
        <a class="btn btn-quiet" data-testid="back-link" data-tour="back" href={pageHref('main')} title="Back to the layers">
          ← Layers
        </a>
      )}
      <ConnectionIndicator connection={connection} />
      <SettingsGear status={status} />
      <ShareButton />
      <button
        class="icon-button tour-button"
        data-testid="tour-replay"
        data-tour="tour"
        title="Take the tour of this page"
        aria-label="Take the tour of this page"
        onClick={() => startTour()}
      >
        ?
      </button>
    </header>
  );
}

// The logo, and what kind of run this is debugging: a PyTorch loop run from
// Python, or a LibTorch program (the status's front_end); before the first
// status, neither.
const FRONT_END: Record<Status['front_end'], { sub: string; run: string }> = {
  python: { sub: 'PyTorch debugger', run: 'a PyTorch training loop run from Python' },
  cpp: { sub: 'LibTorch debugger', run: 'a LibTorch (C++) training program' },
};

function Brand({ frontEnd }: { frontEnd: Status['front_end'] | null }) {
  const known = frontEnd ? FRONT_END[frontEnd] : undefined;
  return (
    <a
      class="brand"
      href="./"
      data-testid="brand"
      data-front-end={frontEnd ?? undefined}
      title={known ? `nansense — debugging ${known.run}` : 'nansense — training debugger'}
    >
      <Logo />
      <span class="brand-name">
        NaN<b>sense</b>
      </span>
      <span class="brand-sub" data-testid="brand-sub">
        {known?.sub ?? 'training debugger'}
      </span>
    </a>
  );
}

// Where the loop is; ellipsized in a narrow window, whole in its tooltip.
// Under a trainer (the Hugging Face Trainer's callback) the trainer's words
// follow: its global step and the micro-batch under way.
function PositionLabel({ status }: { status: Status | null }) {
  const step = trainerStepLabel(status?.live_trainer_step);
  const text = positionLabel(status?.live_position ?? null, status?.schedule ?? null) + (step ? ` · ${step}` : '');
  return (
    <span class="position mono" data-testid="position-label" data-tour="position" title={text}>
      {text}
    </span>
  );
}

// Run, Step, Pause, Detach and Time Travel.
function RunControls({ c, status, ttReason }: { c: Controls; status: Status | null; ttReason: string }) {
  const tt = status?.time_travel;
  return (
    <div class="controls" role="toolbar" aria-label="Training controls" data-tour="step-controls">
      <button class="btn btn-run" data-testid="run" disabled={!c.run} onClick={run} title="Run to the end of training">
        <svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true">
          <path fill="currentColor" d="M7 4.5v15l12-7.5z" />
        </svg>
        Run
      </button>
      <StepButton enabled={c.step} onStep={stepBy} />
      <button class="btn btn-pause" data-testid="pause" disabled={!c.pause} onClick={pause} title="Pause at the next batch">
        <svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true">
          <rect fill="currentColor" x="6" y="5" width="4" height="14" rx="1" />
          <rect fill="currentColor" x="14" y="5" width="4" height="14" rx="1" />
        </svg>
        Pause
      </button>
      <button
        class="btn btn-quiet"
        data-testid="detach"
        disabled={!c.detach}
        onClick={detach}
        title="Train to the end without pausing or capturing again; the UI stays live"
      >
        Detach
      </button>
      <span class="tooltip-wrap" title={ttReason} data-testid="time-travel-wrap">
        <button class="btn btn-tt" data-testid="time-travel" disabled={!tt?.available}
          onClick={() => store.set({ timeTravelOpen: true })}
          aria-label={`Time Travel: ${ttReason}`}>
          Time Travel
        </button>
      </span>
    </div>
  );
}

// Shows or puts away one of the main page's side panes.
function PaneToggle({ pane }: { pane: keyof PaneToggles }) {
  const shown = useSelector(store, (s) => s.panes[pane]);
  const title = `${shown ? 'Hide' : 'Show'} the ${pane} pane`;
  return (
    <button
      class={`icon-button pane-toggle ${shown ? 'pane-toggle-on' : ''}`}
      data-testid={`toggle-${pane}-pane`}
      aria-pressed={shown}
      title={title}
      aria-label={title}
      onClick={() => togglePane(pane)}
    >
      <svg viewBox="0 0 24 24" width="17" height="17" aria-hidden="true">
        {pane === 'architecture' ? (
          <path fill="currentColor" d="M22 11V3h-7v3H9V3H2v8h7V8h2v10h4v3h7v-8h-7v3h-2V8h2v3z" />
        ) : (
          <path fill="currentColor" d="M21 19V5a2 2 0 0 0-2-2H5a2 2 0 0 0-2 2v14c0 1.1.9 2 2 2h14a2 2 0 0 0 2-2zM8.5 13.5l2.5 3 3.5-4.5 4.5 6H5l3.5-4.5z" />
        )}
      </svg>
    </button>
  );
}

// Capture the next batch while training runs.
function RefreshButton({ enabled }: { enabled: boolean }) {
  return (
    <button
      class="btn btn-quiet"
      data-testid="refresh"
      aria-label="Refresh"
      disabled={!enabled}
      onClick={refresh}
      title={enabled ? 'Capture the next batch now, without pausing' : 'Refresh captures a batch while training runs'}
    >
      <svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true">
        <path fill="currentColor" d="M17.65 6.35A7.96 7.96 0 0 0 12 4a8 8 0 1 0 7.74 10h-2.08A6 6 0 1 1 12 6c1.66 0 3.14.69 4.22 1.78L13 11h7V4l-2.35 2.35z" />
      </svg>
      <span class="btn-label">Refresh</span>
    </button>
  );
}

function ShareButton() {
  return (
    <button
      class="icon-button share-button"
      data-testid="share"
      data-tour="share"
      onClick={openShare}
      title="Share a link to this page, the playground, a recording or the library"
      aria-label="Share"
    >
      <svg viewBox="0 0 24 24" width="17" height="17" aria-hidden="true">
        <path
          fill="currentColor"
          d="M18 16.1c-.8 0-1.5.3-2 .8l-7.1-4.2c.1-.2.1-.5.1-.7s0-.5-.1-.7L16 7.2c.5.5 1.2.8 2 .8a3 3 0 1 0-3-3c0 .2 0 .5.1.7L8 9.8A3 3 0 0 0 3 12a3 3 0 0 0 5 2.2l7.1 4.2c-.1.2-.1.4-.1.6a2.9 2.9 0 1 0 3-2.9z"
        />
      </svg>
    </button>
  );
}

// Statistics, update frequency and error-check settings; a mark on the gear
// while the error checks are off.
function SettingsGear({ status }: { status: Status | null }) {
  const debug = status?.debug;
  const off = debug != null && (!debug.enabled || debug.checks.length === 0);
  const recording = status?.recordings.length ?? 0;
  const title = recording
    ? `Recording ${recording} view${recording === 1 ? '' : 's'} — open the settings to save or delete`
    : off
      ? 'Error checks are off — open the settings'
      : 'Settings: statistics, update frequency, error checks, recording';
  return (
    <button
      class={`icon-button gear ${off ? 'gear-off' : ''}`}
      data-testid="settings-gear"
      data-tour="settings"
      title={title}
      aria-label={title}
      onClick={() => store.set({ debugSettingsOpen: true })}
    >
      <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true">
        <path
          fill="currentColor"
          d="M19.14 12.94a7.4 7.4 0 0 0 0-1.88l2.03-1.58a.5.5 0 0 0 .12-.64l-1.92-3.32a.5.5 0 0 0-.61-.22l-2.39.96a7.1 7.1 0 0 0-1.62-.94l-.36-2.54A.5.5 0 0 0 14 2.4h-3.84a.5.5 0 0 0-.5.42l-.36 2.54c-.58.24-1.12.55-1.62.94l-2.39-.96a.5.5 0 0 0-.61.22L2.76 8.88a.5.5 0 0 0 .12.64l2.03 1.58a7.4 7.4 0 0 0 0 1.88l-2.03 1.58a.5.5 0 0 0-.12.64l1.92 3.32c.13.22.39.3.61.22l2.39-.96c.5.39 1.04.7 1.62.94l.36 2.54c.05.24.25.42.5.42H14c.25 0 .45-.18.5-.42l.36-2.54c.58-.24 1.12-.55 1.62-.94l2.39.96c.22.08.48 0 .61-.22l1.92-3.32a.5.5 0 0 0-.12-.64l-2.14-1.58zM12.08 15.5a3.5 3.5 0 1 1 0-7 3.5 3.5 0 0 1 0 7z"
        />
      </svg>
      {recording > 0 ? (
        <i class="gear-count" data-testid="settings-gear-recordings">
          {recording}
        </i>
      ) : (
        off && <i class="gear-badge" data-testid="settings-gear-off" aria-hidden="true" />
      )}
    </button>
  );
}

function StateDot({ status }: { status: Status | null }) {
  const state = status?.state ?? 'unknown';
  // The finished chip and the lost banner say it louder.
  if (state === 'finished' || state === 'lost') return null;
  const text = status ? status.hint : 'connecting to the training loop';
  return (
    <span class={`state-pill state-${state}`} data-testid="run-state" title={text}>
      {state === 'unknown' ? '…' : state}
    </span>
  );
}

function ConnectionIndicator({ connection }: { connection: Connection }) {
  const text =
    connection === 'open' ? 'live' : connection === 'connecting' ? 'connecting…' : 'disconnected — reconnecting…';
  return (
    <span class={`connection connection-${connection}`} data-testid="connection" role="status" aria-live="polite">
      <i class="connection-dot" aria-hidden="true" />
      <span class="connection-text">{text}</span>
    </span>
  );
}

function Logo() {
  return (
    <svg class="logo" viewBox="0 0 24 24" width="20" height="20" aria-hidden="true">
      <rect x="2" y="2" width="9" height="9" rx="2" fill="#f0b429" />
      <rect x="13" y="2" width="9" height="9" rx="2" fill="#4c9aff" />
      <rect x="2" y="13" width="9" height="9" rx="2" fill="#4c9aff" />
      <path d="M13 13h9v9h-9z" fill="#ff00ff" />
      <path d="M13 13h4.5v4.5H13zM17.5 17.5H22V22h-4.5z" fill="#111" />
    </svg>
  );
}
