// The server's JSON shapes (see the HTTP API contract). Fields the server
// adds later are optional here so the page keeps working across versions.

export type RunState = 'running' | 'paused' | 'finished' | 'lost';

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

export interface TimeTravelStatus {
  available: boolean;
  // Only while unavailable.
  reason?: string;
  cached_epochs?: number[];
  total_epochs?: number | null;
  current_epoch?: number | null;
  pending_epoch?: number | null;
}

// GET /api/time_travel: the status's part plus the cache's details.
export interface TimeTravelReport extends TimeTravelStatus {
  uncached_epochs?: number[];
  checkpoints?: { epoch: number; bytes: number }[];
  cache_dir?: string;
  budget_bytes?: number | null;
  bytes_used?: number;
  jumps?: number;
  last_error?: string | null;
  hint?: string;
}

export interface Status {
  state: RunState;
  mode: string;
  live_position: Position | null;
  snapshot_position: Position | null;
  snapshot_sequence: number;
  schedule: Schedule;
  hint: string;
  lost_reason?: string;
  internal_errors?: string[];
  time_travel?: TimeTravelStatus;
  paused_at_ms?: number;
  // The numerical checks, and the standing error the banner shows.
  debug?: DebugSummary;
}

// ---- Numerical debugging (GET /api/debug, the status's `debug`) ----

export type DebugReason = 'nan' | 'inf' | 'underflow' | 'overflow';
export type DebugCheck = 'nan_inf' | 'under_over';
export type RootCauseStatus = 'found' | 'from_outside' | 'not_reproduced' | 'pending' | 'not_traced';

export interface ProducerBrief {
  op: string;
  pass: 'forward' | 'backward' | string;
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
  // The choice for a held update: skip it (true) or apply it (false, the
  // default). Reset once the loop resumes; `update` then says what was done.
  skip_update: boolean;
}

export interface DebugSummary {
  enabled: boolean;
  checks: DebugCheck[];
  error: DebugErrorSummary | null;
}

export interface TensorFacts {
  shape: number[];
  dtype: string;
  numel: number;
  nan: number;
  pos_inf: number;
  neg_inf: number;
  // The range of its finite values; null when it has none.
  min: Num | null;
  max: Num | null;
}

export interface OpReport {
  op: string;
  pass: string;
  backward_node: string | null;
  forward_op: string | null;
  layer: string | null;
  index: number;
  inputs: TensorFacts[];
  outputs: TensorFacts[];
}

export interface RootCause {
  status: RootCauseStatus;
  summary: string;
  producer: OpReport | null;
  propagators: OpReport[];
  propagator_count: number;
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
  text: string;
}

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
}

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
  description?: string;
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

// A number the server could not write as JSON: NaN and the infinities.
export type Num = number | 'nan' | 'inf' | '-inf';

export interface TensorSummary {
  shape: number[];
  dtype: string;
  numel: number;
  min?: Num | null;
  max?: Num | null;
  mean?: Num | null;
  non_finite: number;
}

export interface SnapshotLayer {
  name: string;
  kind: string;
  activation: TensorSummary | null;
  gradient: TensorSummary | null;
}

export interface SnapshotInput {
  name: string;
  shape: number[];
  dtype: string;
}

export interface SnapshotParameter {
  name: string;
  weight: TensorSummary;
  gradient: TensorSummary | null;
}

export interface Snapshot {
  position: Position;
  sequence: number;
  batch_size?: number;
  inputs?: SnapshotInput[];
  layers: SnapshotLayer[];
  parameters: SnapshotParameter[];
}

export type StripKind = 'activation' | 'gradient';
export type Values = 'unchanged' | 'abs' | 'square';

// The X-Nansense-Render header of a layer strip.
export interface LayerRenderInfo {
  layer: string;
  kind: StripKind;
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
  scale: 'diverging' | 'sequential';
  scale_max: Num;
  nan: number;
  pos_inf: number;
  neg_inf: number;
}

// The X-Nansense-Render header of an input image.
export interface InputRenderInfo {
  input: number;
  name: string;
  sample: number;
  batch_size: number;
  layout: 'image' | 'strip';
  width: number;
  height: number;
  hint?: string;
}

// Pushed over /ws.
export type PushMessage =
  | { type: 'status'; status: Status }
  | {
      type: 'snapshot';
      sequence: number;
      position: Position;
      architecture_changed: boolean;
      // Optional: lets the page clamp the selected sample before the JSON.
      batch_size?: number;
    }
  // Every watched strip of snapshot `sequence` was pushed, except `failed`.
  | { type: 'strips_done'; sequence: number; failed: (StripView & { error: string })[] }
  // The server could not use a message the page sent.
  | { type: 'error'; message: string };

// A strip the page asks the server to push with every snapshot.
export interface StripView {
  layer: string;
  kind: StripKind;
  sample: number;
  average: boolean;
  values: Values;
}
