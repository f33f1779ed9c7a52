// The server's JSON shapes. Every reply, picture header and push message
// type is generated at build time from the server's declarations
// (src/server/controller/wire_types.cpp) into ./wire.gen.ts, re-exported here. What is
// written here is what the page sends and reads per command: `CommandArgs` /
// `Replies` must fit the server's command table (src/server/controller/commands.cpp),
// which tests/wire/check_types.sh checks, so a key renamed on either side
// fails that test.
import type {
  Architecture,
  AutoExperiment,
  AutoExperimentCleared,
  BinSamples,
  CurrentStats,
  DebugCheck,
  DebugReport,
  DebugSettings,
  ExperimentAutoRun,
  ExperimentCancel,
  ExperimentList,
  ExperimentPictureInfo,
  ExperimentResult,
  Patches,
  PatchGrid,
  InputInfo,
  InstrumentStripInfo,
  Metrics,
  ProbeMode,
  ProbeStatus,
  Recording,
  Recordings,
  RecordingsDiscarded,
  RecordingsStopped,
  Settings,
  Snapshot,
  SnapshotSaved,
  StatsHistory,
  StatsList,
  StatsScope,
  Status,
  StripInfo,
  StripKind,
  StripView,
  TimeTravelReport,
  UpdateFrequency,
  Values,
  WatchPerformance,
  WeightStats,
  WeightStripInfo,
} from './wire.gen';

export type * from './wire.gen';

// POST /api/debug/choose_update.
export type UpdateAction = 'skip' | 'apply';

// ---- Commands, by the server's names ----

export type StepUnit = 'batch' | 'phase' | 'epoch';

export type ExperimentKindName = 'deep_dream' | 'gradcam' | 'neuron_gradient' | 'neuron_ig' | 'occlusion';

// start_recording / save_snapshot: one of the views a page shows.
export interface RecordViewArgs {
  view: 'layers' | 'weights' | 'histograms' | 'patches' | 'experiment';
  layers?: string[];
  layer?: string;
  phase?: string;
  // layers: which strips; experiment: which experiment.
  kind?: 'activation' | 'gradient' | 'both' | ExperimentKindName;
  params?: Record<string, unknown>;
  sample?: number;
  average?: boolean;
  values?: Values;
  log_x?: boolean;
  log_y?: boolean;
  heatmap?: boolean;
}

export interface CommandArgs {
  step: { unit: StepUnit; timeout_seconds: number };
  run: { detach?: boolean; timeout_seconds: number };
  pause: { timeout_seconds: number };
  run_until: { phase: string; epoch: number; batch: number; timeout_seconds: number };
  time_travel: { epoch: number; timeout_seconds: number };
  // A partial update: only the settings given change.
  configure_debug_checks: Partial<Omit<DebugSettings, 'capsule_dir'>>;
  // No category: every category the standing error has.
  silence_debug_check: { category?: DebugCheck };
  clear_debug_error: Record<never, never>;
  choose_update: { action: UpdateAction };
  // `sequence`: the snapshot the page shows (a newer one that cannot give
  // the picture is answered 204 No Content, not refused).
  render_strip: StripView & { sequence?: number };
  render_input: { input: number; sample: number; sequence?: number };
  get_weight_stats: { layer: string; parameters?: string[] };
  // x_dim / y_dim / tile_dim: -1 for none; index: one entry per dimension.
  render_weight_strip: {
    layer: string;
    parameter: string;
    tensor?: string;
    x_dim?: number;
    y_dim?: number;
    tile_dim?: number;
    index?: number[];
    sequence?: number;
  };
  render_instrument_strip: Omit<StripView, 'kind'> & { instrument: string; sequence?: number };
  refresh: { timeout_seconds: number };
  set_update_frequency: { unit: UpdateFrequency['unit']; n: number; phase?: string | null };
  set_stats_scope: { scope: StatsScope };
  watch_layers: { layers: string[] };
  unwatch_layers: { layers: string[] };
  set_watch_performance: Partial<WatchPerformance>;
  set_patch_layers: { layers?: string[] };
  get_recording_file: { path: string; download?: boolean };
  get_patches: { layer: string; phase?: string; grid?: PatchGrid; heatmap?: boolean; current_batch?: boolean };
  get_bin_samples: { layer: string; kind?: StripKind; channel?: number; bin: number; count?: number };
  get_stats_history: { layer: string; phase?: string };
  get_current_stats: { layer: string };
  get_metrics: { layers?: string[] };
  run_experiment: { kind: ExperimentKindName; layer: string; params?: { [key: string]: unknown }; timeout_seconds?: number };
  get_experiment_result: { seq: number };
  cancel_experiment: { seq?: number };
  render_experiment: { seq: number; overlay?: boolean };
  set_auto_run_experiments: { enabled: boolean };
  set_auto_experiment: { tab: string; kind: ExperimentKindName; layer: string; params?: { [key: string]: unknown } };
  clear_auto_experiment: { tab: string };
  pin_batch: { timeout_seconds?: number };
  unpin_batch: { timeout_seconds?: number };
  set_probe_mode: { mode: ProbeMode; timeout_seconds?: number };
  add_perturbation: { index: number[]; values: number[]; sample?: number; input_name?: string; timeout_seconds?: number };
  clear_perturbations: { timeout_seconds?: number };
  start_recording: RecordViewArgs;
  save_snapshot: RecordViewArgs;
  stop_recording: { key?: string };
  discard_recording: { key?: string };
}

// What the page reads from each command it uses (a picture's: the info
// beside the PNG).
export interface Replies {
  get_status: Status;
  get_architecture: Architecture;
  get_snapshot: Snapshot;
  step: Status;
  run: Status;
  pause: Status;
  run_until: Status;
  get_time_travel_status: TimeTravelReport;
  time_travel: Status;
  get_debug_report: DebugReport;
  configure_debug_checks: DebugReport;
  silence_debug_check: DebugReport;
  clear_debug_error: DebugReport;
  choose_update: DebugReport;
  render_strip: StripInfo;
  render_input: InputInfo;
  get_weight_stats: WeightStats;
  render_weight_strip: WeightStripInfo;
  render_instrument_strip: InstrumentStripInfo;
  refresh: Status;
  get_settings: Settings;
  set_update_frequency: Settings;
  set_stats_scope: Settings;
  watch_layers: Settings;
  unwatch_layers: Settings;
  set_watch_performance: Settings;
  set_patch_layers: Settings;
  get_patches: Patches;
  get_bin_samples: BinSamples;
  list_stats: StatsList;
  get_stats_history: StatsHistory;
  get_current_stats: CurrentStats;
  get_metrics: Metrics;
  list_experiments: ExperimentList;
  run_experiment: ExperimentResult;
  get_experiment_result: ExperimentResult;
  cancel_experiment: ExperimentCancel;
  render_experiment: ExperimentPictureInfo;
  set_auto_run_experiments: ExperimentAutoRun;
  set_auto_experiment: AutoExperiment;
  clear_auto_experiment: AutoExperimentCleared;
  get_probe_status: ProbeStatus;
  pin_batch: ProbeStatus;
  unpin_batch: ProbeStatus;
  set_probe_mode: ProbeStatus;
  add_perturbation: ProbeStatus;
  clear_perturbations: ProbeStatus;
  list_recordings: Recordings;
  start_recording: Recording;
  stop_recording: RecordingsStopped;
  discard_recording: RecordingsDiscarded;
  save_snapshot: SnapshotSaved;
}
