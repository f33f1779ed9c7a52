// The server's JSON shapes. Every type here named like one the server
// declares (src/server/wire_types.cpp) must be identical to it, and
// `CommandArgs` / `Replies` must fit the server's command table
// (src/server/commands.cpp): tests/wire/check_types.sh compares them, so a
// key renamed on either side fails that test.

export type RunState = 'running' | 'paused' | 'finished' | 'lost';
// Named after the command that set it.
export type Mode = 'step_batch' | 'step_phase' | 'step_epoch' | 'run_until' | 'run' | 'detach';

// A number the server could not write as JSON: NaN and the infinities.
export type Num = number | 'nan' | 'inf' | '-inf';

export interface Position {
  phase: string;
  epoch: number;
  batch_idx: number;
  is_last_in_phase: boolean;
  is_last_in_epoch: boolean;
  is_last_in_run: boolean;
  text: string;
}

export interface PhaseSchedule {
  name: string;
  batches: number | null;
}

export interface Schedule {
  epochs: number | null;
  declared: boolean;
  phases: PhaseSchedule[];
}

// The status's part: what the Time Travel button needs.
export interface TimeTravelStatus {
  available: boolean;
  // Only while unavailable.
  reason?: string;
  cached_epochs: number[];
  total_epochs: number;
  current_epoch: number | null;
  pending_epoch: number | null;
}

// GET /api/time_travel: the status's part plus the cache's details.
export interface TimeTravelReport extends TimeTravelStatus {
  uncached_epochs: number[];
  checkpoints: { epoch: number; bytes: number }[];
  cache_dir: string | null;
  budget_bytes: number | null;
  bytes_used: number;
  jumps: number;
  last_error: string | null;
  hint: string;
}

export interface Status {
  state: RunState;
  mode: Mode;
  live_position: Position | null;
  snapshot_position: Position | null;
  snapshot_sequence: number;
  snapshot_batch_size: number;
  // The samples its batch tensors hold: fewer than the batch where the
  // snapshot budget left some out.
  snapshot_samples_kept: number;
  schedule: Schedule;
  hint: string;
  time_travel: TimeTravelStatus;
  // The numerical checks, and the standing error the banner shows.
  debug: DebugSummary;
  paused_at_ms?: number;
  lost_reason?: string;
  internal_errors?: string[];
  // Only from refresh.
  refreshed?: boolean;
  // Statistics collection and the live-update cadence.
  stats: StatsSummary;
  // The probe (pinned batch, forward mode, perturbations) and its last run.
  probe: ProbeStatus;
}

// ---- Probes: the paused model re-run on pinned or perturbed inputs ----

export type ProbeMode = 'unchanged' | 'eval' | 'train';

export interface Perturbation {
  input: string;
  sample: number;
  // [y, x] of an image input, [feature] of a flat one.
  index: number[];
  values: Num[];
}

export interface ProbeResultSummary {
  run: number;
  // The batch whose inputs were re-run.
  position: Position;
  // Layers show perturbed - original.
  diff: boolean;
  perturbations_applied: number;
  snapshot_sequence: number;
  layers?: number;
}

export interface ProbeStatus {
  active: boolean;
  pinned: boolean;
  pinned_position: Position | null;
  mode: ProbeMode;
  perturbations: Perturbation[];
  runs_completed: number;
  pending: boolean;
  result: ProbeResultSummary | null;
  error?: string;
  hint: string;
  cleared?: number;
}

// Set on a snapshot that is a probe's result shown in the captured batch's place.
export interface SnapshotProbe {
  run: number;
  position: Position;
  mode: ProbeMode;
  diff: boolean;
}

// ---- Numerical debugging (GET /api/debug, the status's `debug`) ----

export type DebugReason = 'nan' | 'inf' | 'underflow' | 'overflow';
export type DebugCheck = 'nan_inf' | 'under_over';
export type RootCauseStatus = 'found' | 'from_outside' | 'not_reproduced' | 'pending' | 'not_traced';

export interface ProducerBrief {
  op: string;
  pass: string;
  layer: string | null;
}

export interface DebugErrorSummary {
  reasons: DebugReason[];
  reason_labels: string[];
  position: Position;
  text: string;
  // Affected layers, in graph order.
  layers: string[];
  root_cause_status: RootCauseStatus | null;
  producer: ProducerBrief | null;
  capsule: string | null;
  hits: number;
  update: DebugUpdate;
  // The batch ran again, traced: the loop body saw it twice.
  rerun: boolean;
  // The choice for a held update: skip it (true) or apply it (false, the
  // default). Reset once the loop resumes; `update` then says what was done.
  skip_update: boolean;
}

export interface DebugSummary {
  enabled: boolean;
  checks: DebugCheck[];
  error: DebugErrorSummary | null;
}

// What the server reports about one tensor, in every reply that describes one
// (snapshot summaries, layer and weight statistics, a root cause's ops).
export interface TensorStats {
  shape: number[];
  dtype: string;
  numel: number;
  // finite + nan + pos_inf + neg_inf == numel.
  finite: number;
  nan: number;
  pos_inf: number;
  neg_inf: number;
  // Over the finite values; null when there are none.
  min: Num | null;
  max: Num | null;
  mean: Num | null;
  // Only in layer and weight statistics.
  std?: Num | null;
  median?: Num | null;
  zero_fraction?: Num;
  norm?: Num;
}

export interface OpReport {
  op: string;
  pass: 'forward' | 'backward' | 'step';
  backward_node: string | null;
  forward_op: string | null;
  layer: string | null;
  index: number;
  inputs: TensorStats[];
  outputs: TensorStats[];
}

export interface RootCause {
  status: RootCauseStatus;
  summary: string;
  producer: OpReport | null;
  propagators: OpReport[];
  propagator_count: number;
  other_producer_count: number;
}

// The optimizer update of the batch that tripped: 'held' while the loop is
// paused before its optimizer step, waiting for the choice; then what the loop
// did with it; null when the trip was found after the step (nothing to choose).
export type DebugUpdate = null | 'held' | 'applied' | 'skipped';

// POST /api/debug/choose_update.
export type UpdateAction = 'skip' | 'apply';

export type DebugSource = 'activation' | 'activation_gradient' | 'weight_gradient';

export interface LayerReport {
  layer: string;
  nan: number;
  inf: number;
  underflow: number;
  overflow: number;
  dtype: string | null;
  sources: DebugSource[];
}

export interface DebugBand {
  dtype: string;
  tiny: number;
  overflow: number;
}

export interface DebugError {
  position: Position;
  reasons: DebugReason[];
  reason_labels: string[];
  checks_used: DebugCheck[];
  layers: LayerReport[];
  bands: DebugBand[];
  root_cause: RootCause | null;
  capsule: string | null;
  hits: number;
  update: DebugUpdate;
  rerun: boolean;
  text: string;
}

// The same names as the C++ DebugSettings' options.
export interface DebugSettings {
  enabled: boolean;
  interval_batches: number;
  check_nan_inf: boolean;
  check_under_over: boolean;
  threshold_fraction: number;
  trace_interval_batches: number;
  rerun_to_trace: boolean;
  allow: string[];
  capsule_dir: string;
}

export interface DebugReport {
  settings: DebugSettings;
  error: DebugError | null;
  checked_batches: number;
  // Whether skipping the held update is chosen (see DebugErrorSummary).
  skip_update: boolean;
  unchecked_tensors: UncheckedTensor[];
  rerun: DebugRerun;
}

// A tensor whose check failed: that check is off for it, the rest run.
export interface UncheckedTensor {
  source: 'activation' | 'activation_gradient' | 'weight_gradient';
  tensor: string;
  layer: string;
  checks: DebugCheck[];
  error: string;
  position: Position;
}

// What a traced re-run of a tripped batch restores and what it repeats.
export interface DebugRerun {
  enabled: boolean;
  restored: string[];
  runs_twice: string[];
  detect: string;
}

// ---- The architecture and the snapshot ----

export type LayerRole = 'input' | 'module' | 'op';

export interface Layer {
  name: string;
  role: LayerRole;
  kind: string;
  module: string;
  ops: string[];
  output_shape: number[];
  dtype: string;
  // The names of the parameter tensors this layer owns.
  parameters: string[];
  description: string;
  // A pure shape op (view, permute, select...): folded into the edges unless shown.
  shape_op: boolean;
}

export interface Edge {
  from: string;
  to: string;
}

export interface Architecture {
  captured: boolean;
  reason?: string;
  layers: Layer[];
  edges: Edge[];
  inputs: string[];
}

export interface SnapshotLayer {
  name: string;
  kind: string;
  activation: TensorStats | null;
  gradient: TensorStats | null;
  // watch_layer_tensor instruments' outputs by name.
  instruments?: Record<string, TensorStats>;
}

export interface SnapshotInput {
  index: number;
  name: string;
  shape: number[];
  dtype: string;
}

export interface SnapshotParameter {
  name: string;
  weight: TensorStats;
  gradient: TensorStats | null;
  optimizer_state?: Record<string, Num | TensorStats>;
  hyperparameters?: Record<string, Num>;
}

// What the snapshot budget (StartOptions::snapshot_budget) left out.
export interface SnapshotBudget {
  budget_bytes: number;
  held_bytes: number;
  full_bytes: number;
  parameter_bytes: number;
  trimmed: boolean;
  note?: string;
}

export interface Snapshot {
  position: Position;
  sequence: number;
  batch_size: number;
  samples_kept: number;
  budget: SnapshotBudget;
  inputs: SnapshotInput[];
  layers: SnapshotLayer[];
  parameters: SnapshotParameter[];
  probe: SnapshotProbe | null;
}

// ---- A layer's parameters (the Weights page) ----

// Each dimension's role in a weight strip: X across a tile, Y down it, Tile
// (one tile per index), the others held at `index` (one entry per dimension).
export interface WeightLayout {
  x_dim: number | null;
  y_dim: number | null;
  tile_dim: number | null;
  index: number[];
}

export interface ParameterStats {
  name: string;
  value: TensorStats | null;
  note?: string;
  gradient?: TensorStats | null;
  gradient_note?: string;
  optimizer_state?: Record<string, Num | TensorStats>;
  optimizer_state_note?: string;
  hyperparameters?: Record<string, Num>;
  default_layout?: WeightLayout;
  instruments?: Record<string, TensorStats>;
}

export interface WeightStats {
  layer: string;
  kind: string;
  position: Position;
  sequence: number;
  parameters: ParameterStats[];
}

// ---- Pictures ----

// The X-Nansense-Render header of a weight strip.
export interface WeightStripInfo {
  layer: string;
  parameter: string;
  tensor: string;
  shape: number[];
  layout: WeightLayout;
  position: Position;
  sequence: number;
  tiles: number;
  tile_width: number;
  tile_height: number;
  width: number;
  height: number;
  scale_max: Num;
  nan: number;
  pos_inf: number;
  neg_inf: number;
}

// A layer-tensor instrument's strip: a StripInfo whose kind is "instrument:<name>".
export interface InstrumentStripInfo {
  layer: string;
  kind: string;
  position: Position;
  sequence: number;
  sample: number;
  batch_size: number;
  average: boolean;
  values: Values;
  layout: string;
  tiles: number;
  tile_width: number;
  tile_height: number;
  width: number;
  height: number;
  // boolean: a bool tensor in two colours; categorical: an integer one, a
  // colour per value (values and average do not apply to either).
  scale: 'diverging' | 'sequential' | 'boolean' | 'categorical';
  dtype: string;
  scale_max: Num;
  nan: number;
  pos_inf: number;
  neg_inf: number;
  // boolean and categorical scales only.
  value_min?: number;
  value_max?: number;
  true_count?: number;
  distinct?: number;
}

export type StripKind = 'activation' | 'gradient';
export type Values = 'unchanged' | 'abs' | 'square';

// The X-Nansense-Render header of a strip (and a pushed strip frame's header).
export interface StripInfo {
  layer: string;
  kind: StripKind;
  position: Position;
  sequence: number;
  sample: number;
  batch_size: number;
  average: boolean;
  values: Values;
  layout: string;
  tiles: number;
  tile_width: number;
  tile_height: number;
  width: number;
  height: number;
  // boolean: a bool tensor in two colours; categorical: an integer one, a
  // colour per value (values and average do not apply to either).
  scale: 'diverging' | 'sequential' | 'boolean' | 'categorical';
  dtype: string;
  scale_max: Num;
  nan: number;
  pos_inf: number;
  neg_inf: number;
  // boolean and categorical scales only.
  value_min?: number;
  value_max?: number;
  true_count?: number;
  distinct?: number;
}

// The X-Nansense-Render header of an input image.
export interface InputInfo {
  input: number;
  name: string;
  position: Position;
  sequence: number;
  sample: number;
  batch_size: number;
  // values: a bool or integer input as a grid of cells with the values
  // written in them.
  layout: 'image' | 'strip' | 'values';
  width: number;
  height: number;
  hint?: string;
  dtype: string;
  // bool and integer inputs only.
  value_min?: number;
  value_max?: number;
  true_count?: number;
  // The normalisation the picture undoes (x * std + mean; one value for
  // every channel, or one each); empty: none.
  mean: Num[];
  std: Num[];
}

// ---- Statistics over time (issue 12) ----

// Which layers fold their batches into the statistics.
export type StatsScope = 'none' | 'watched' | 'all';

// When a batch is captured and published while the loop runs: every n
// batches (of one phase, or any), every n epochs, or every n seconds.
export interface UpdateFrequency {
  unit: 'batch' | 'epoch' | 'seconds';
  // batch/epoch: an integer >= 1; seconds: > 0.
  n: number;
  // Only with the batch unit; null: any phase.
  phase: string | null;
}

// The status's part.
export interface StatsSummary {
  scope: StatsScope;
  watched_layers: string[];
  // The published statistics' sequence; 0 before any.
  sequence: number;
  collecting: boolean;
  update_frequency: UpdateFrequency;
}

export interface WatchPerformance {
  channel_limit_enabled: boolean;
  channel_limit: number;
  // On the CPU, the most values of each tensor a histogram counts (0: all).
  histogram_sample: number;
  // Inputs a Min/Max gallery keeps per channel and ranking (0: galleries off).
  samples_per_channel: number;
  // Also rank by a channel's mean, keeping whole inputs.
  average_galleries: boolean;
}

export interface Settings {
  update_frequency: UpdateFrequency;
  stats_scope: StatsScope;
  watched_layers: string[];
  watch_performance: WatchPerformance;
  // The layers Min/Max galleries collect for; null: the watched layers.
  patch_layers: string[] | null;
  stats_collecting: boolean;
  auto_run_experiments: boolean;
  // {kind: {param: value}}: the session's experiment defaults.
  experiment_defaults: { [key: string]: { [key: string]: unknown } };
  experiment_time_limit_seconds: number;
  // Only from set_watch_performance: whether the change cleared what was
  // collected.
  statistics_flushed?: boolean;
}

// One accumulator: a layer's activations or activation gradients over one
// phase's batches of one epoch. mean/std/median/min/max are null when n == 0.
// hist: 211 counts over the signed-log bins (null once the epoch is no longer
// the newest: older epochs keep scalars, median and dead count).
export interface RunningStats {
  n: number;
  sum: Num;
  sum_sq: Num;
  mean: Num | null;
  std: Num | null;
  median: Num | null;
  min: Num | null;
  max: Num | null;
  nan: number;
  pos_inf: number;
  neg_inf: number;
  hist: number[] | null;
  channel_hists: number[][] | null;
  channels: number;
  // Values the bins hold: n + nan + pos_inf + neg_inf, fewer when the
  // histograms were sampled (the scalars and counts above stay exact); 0
  // once collapsed.
  binned: number;
  dead_count: number | null;
  dead_channels: number[];
}

// One (layer, phase, epoch) bucket.
export interface EpochStats {
  epoch: number;
  batches: number;
  activation: RunningStats | null;
  gradient: RunningStats | null;
}

// A parameter at an epoch's first collected batch.
export interface ParameterSample {
  epoch: number;
  value_norm: Num;
  mean: Num;
  std: Num;
  min: Num;
  max: Num;
  grad_norm: Num | null;
  grad_mean: Num | null;
  grad_std: Num | null;
  grad_min: Num | null;
  grad_max: Num | null;
  update_ratio: Num | null;
}

export interface SeriesInfo {
  name: string;
  phase: string;
  layer: string;
}

// GET /api/stats: what has statistics, layers in graph order.
export interface StatsList {
  sequence: number;
  edges: number[];
  layers: { layer: string; phases: { phase: string; epochs: number[] }[] }[];
  parameters: Record<string, string[]>;
  series: SeriesInfo[];
  device_bytes: number;
}

// GET /api/stats/history: one layer's buckets by phase, ascending epochs.
export interface StatsHistory {
  layer: string;
  edges: number[];
  phases: Record<string, EpochStats[]>;
  parameters: Record<string, ParameterSample[]>;
}

// GET /api/stats/current: one layer over the last captured batch.
// Where the snapshot budget left samples out: what a reply's figures cover.
export interface SamplesKept {
  kept: number;
  of: number;
  note: string;
}

export interface CurrentStats {
  layer: string;
  position: Position;
  activation: RunningStats | null;
  gradient: RunningStats | null;
  samples?: SamplesKept;
  // A bool or integer layer: its values counted (activation is null).
  values?: ValueCounts;
  note?: string;
}

export interface ValueCounts {
  dtype: string;
  numel: number;
  min: number | null;
  max: number | null;
  distinct: number;
  true_count?: number;
  true_fraction?: number;
}

export interface ScalarPoint {
  epoch: number;
  // null for a point reduced over its epoch.
  batch: number | null;
  // epoch + batch / batches of that epoch's phase.
  x: Num;
  value: Num;
}

export interface Series extends SeriesInfo {
  points: ScalarPoint[];
}

export interface FailedMetric {
  name: string;
  error: string;
}

export interface Metrics {
  series: Series[];
  // Instruments that threw and were disabled.
  failed: FailedMetric[];
}

// ---- The push channel (/ws) ----

// A strip the page asks the server to push with every snapshot: exactly
// render_strip's arguments.
export interface StripView {
  layer: string;
  kind: StripKind;
  sample: number;
  average: boolean;
  values: Values;
}

export interface FailedStrip extends StripView {
  error: string;
}

export type PushMessage =
  | { type: 'status'; status: Status }
  // Carries the batch size so the page can clamp its sample before the JSON.
  | {
      type: 'snapshot';
      sequence: number;
      position: Position;
      batch_size: number;
      samples_kept: number;
      architecture_changed: boolean;
    }
  // Every watched strip of snapshot `sequence` was pushed, except `failed`.
  | { type: 'strips_done'; sequence: number; failed: FailedStrip[] }
  // An experiment's progress or outcome (without its objective history).
  | { type: 'experiment'; result: ExperimentResult }
  // The server could not use a message the page sent.
  | { type: 'error'; message: string };

export interface WatchMessage {
  type: 'watch';
  strips: StripView[];
}

// ---- Commands, by the server's names ----

export type StepUnit = 'batch' | 'phase' | 'epoch';

// What the page sends to each command it uses. Commands take
// timeout_seconds 0: the page follows the run over the push channel and never
// holds a request open.
// --- experiments on the paused model (/experiment) ---
export interface ExperimentParamSpec {
  key: string;
  label: string;
  description: string;
  type: 'integer' | 'number' | 'boolean' | 'choice';
  default: unknown;
  minimum?: number;
  maximum?: number;
  options?: string[];
}

export interface ExperimentKind {
  kind: string;
  title: string;
  summary: string;
  description: string;
  attribution: boolean;
  layers: string[];
  unusable_layers: { layer: string; reason: string }[];
  params: ExperimentParamSpec[];
}

export interface ExperimentList {
  kinds: ExperimentKind[];
  time_limit_seconds: number;
  auto_run: boolean;
  forward_known: boolean;
  kept_results: number[];
  // The pages' registered auto experiments (one per tab).
  auto_experiments: { tab: string; kind: string; layer: string; params: { [key: string]: unknown } }[];
}

export type ExperimentKindName = 'deep_dream' | 'gradcam' | 'neuron_gradient' | 'neuron_ig' | 'occlusion';

export type ExperimentStage = 'queued' | 'running' | 'done' | 'stopped' | 'failed' | 'absent';

export interface ExperimentResult {
  seq: number;
  kind: string;
  layer: string;
  params: { [key: string]: unknown };
  stage: ExperimentStage;
  done: boolean;
  step: number;
  total: number;
  objective: Num | null;
  seconds: Num;
  notes: string[];
  queued_ahead?: number;
  // The tab whose auto experiment this run is (absent: asked for directly).
  tab?: string;
  error?: string;
  stop_reason?: string;
  objectives?: Num[];
  channels?: number[];
  produced_images?: number;
  targets?: number[];
  target_values?: Num[];
  attribution_sums?: Num[];
  attributions?: { min: Num; max: Num; mean_abs: Num }[];
  attribution_shape?: number[];
  ignored_params?: string[];
}

export interface ExperimentCancel {
  cancelled: number;
}

export interface ExperimentAutoRun {
  auto_run_experiments: boolean;
}

// set_auto_experiment: seq is the run it started (0: it waits for the next
// snapshot, or the registration was only renewed).
export interface AutoExperiment {
  tab: string;
  seq: number;
  params: { [key: string]: unknown };
  ignored_params: string[];
  auto_run: boolean;
  expires_after_seconds: number;
}

export interface AutoExperimentCleared {
  tab: string;
  removed: boolean;
}

export interface ExperimentPictureInfo {
  seq: number;
  kind: string;
  stage: string;
  step: number;
  total: number;
  overlay: boolean;
  width: number;
  height: number;
}

export type GalleryRanking = 'max_pixel' | 'min_pixel' | 'max_average' | 'min_average';

// One Min/Max gallery cell: the input behind a channel's extreme.
export interface ExtremeCell {
  slot: number;
  channel: number;
  filled: boolean;
  score: Num | null;
  batch: number;
  sample: number;
  // Where the extreme was in the activation, and the crop's origin in the input.
  y: number;
  x: number;
  top: number;
  left: number;
  // base64 PNG of the crop; null for an empty slot.
  png: string | null;
}

export interface Extremes {
  layer: string;
  phase: string;
  epoch: number;
  // The phases whose newest epoch has galleries for the layer.
  phases: string[];
  ranking: GalleryRanking;
  rankings: GalleryRanking[];
  heatmap: boolean;
  samples: number;
  channels: number;
  crop: { height: number; width: number };
  sequence: number;
  // Why there are no cells, or what the cells leave out.
  note: string | null;
  cells: ExtremeCell[];
}

export interface BinSample {
  sample: number;
  // The element's coordinates after the batch dimension.
  index: number[];
  value: Num;
  top: number;
  left: number;
  png: string | null;
}

export interface BinSamples {
  layer: string;
  kind: StripKind;
  channel: number | null;
  bin: number;
  range: Num[];
  matches: number;
  sequence: number;
  position: Position;
  note: string | null;
  samples: BinSample[];
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
  get_extremes: { layer: string; phase?: string; ranking?: GalleryRanking; heatmap?: boolean };
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
  get_extremes: Extremes;
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
}
