#include "numerics/monitor.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include "capture/tracer.h"
#include "common/dtype.h"
#include "numerics/bands.h"
#include "numerics/capsule.h"
#include "numerics/checks.h"
#include "numerics/debug_json.h"

namespace nansense::numerics {

namespace {

bool has_nan_inf(const std::vector<std::string>& reasons) {
  for (const auto& r : reasons) {
    if (r == "nan" || r == "inf") return true;
  }
  return false;
}

void add_reason(std::vector<std::string>& reasons, const char* reason) {
  if (std::find(reasons.begin(), reasons.end(), reason) != reasons.end()) return;
  reasons.push_back(reason);
  static const std::vector<std::string> order = {"nan", "inf", "underflow", "overflow"};
  std::stable_sort(reasons.begin(), reasons.end(), [&](const auto& a, const auto& b) {
    return std::find(order.begin(), order.end(), a) < std::find(order.begin(), order.end(), b);
  });
}

// Whether a hit is a new problem rather than a repeat of the standing one: a
// reason the standing error does not have, or another op that made non-finite
// values from finite inputs. Values that were already non-finite when the
// batch began (weights an applied update poisoned) are the standing problem's.
bool differs(const DebugError& standing, const DebugError& hit) {
  for (const auto& r : hit.reasons) {
    if (std::find(standing.reasons.begin(), standing.reasons.end(), r) == standing.reasons.end()) return true;
  }
  const auto producer = [](const DebugError& e) -> const OpReport* {
    return e.root_cause && e.root_cause->status == RootCause::Status::kFound && e.root_cause->producer
               ? &*e.root_cause->producer
               : nullptr;
  };
  const OpReport* a = producer(standing);
  const OpReport* b = producer(hit);
  return a && b && (a->op != b->op || a->layer != b->layer);
}

RootCause cause_of(RootCause::Status status, std::string summary) {
  RootCause cause;
  cause.status = status;
  cause.summary = std::move(summary);
  return cause;
}

}  // namespace

Monitor::Monitor(torch::nn::Module& model, std::vector<torch::optim::Optimizer*> optimizers,
                 const DebugSettings& settings, Host host)
    : model_(model),
      optimizers_(std::move(optimizers)),
      host_(std::move(host)),
      state_(settings, host_.changed),
      recorder_(model),
      settings_(settings) {
  for (const auto& p : model.named_parameters()) params_.emplace_back(p.key(), p.value());
  guard_ = std::make_unique<GradientGuard>(
      model, [this] { on_backward_end(); }, [this] { after_reduction(); });
}

Monitor::~Monitor() { guard_.reset(); }

void Monitor::fail(const std::string& what) {
  disabled_ = true;
  active_ = false;
  guard_->start_batch(false);
  op_tracer_.reset();
  if (host_.report_error) host_.report_error("numerical checks disabled: " + what);
}

void Monitor::turn_off(UncheckedTensor failed) {
  failed.position = position_;
  unchecked_.insert(unchecked_key(failed.source, failed.tensor));
  std::string checks;
  for (const auto& c : failed.checks) checks += (checks.empty() ? "" : ", ") + c;
  const std::string what = failed.source == "weight_gradient" ? "the weight gradient of "
                           : failed.source == "activation"    ? "the activations of "
                                                              : "the activation gradients of ";
  state_.note_unchecked(failed);
  if (host_.report_error) {
    host_.report_error("numerical check" + std::string(failed.checks.size() == 1 ? " " : "s ") + checks +
                       " turned off for " + what + failed.tensor + " at " + position_.to_string() +
                       ": checking it failed (" + failed.error + "); every other tensor stays checked");
  }
}

Monitor::Trace Monitor::plan_batch(const BatchPosition& position, bool repeat) {
  settings_ = state_.settings();
  position_ = position;
  training_thread_ = std::this_thread::get_id();
  tracer_ = nullptr;
  op_tracer_.reset();
  traced_ = checked_in_backward_ = tripped_ = pause_at_end_ = settled_ = deferring_ = deferred_pause_ = decided_ =
      false;
  last_backwards_ = std::exchange(backwards_, 0);
  roots_.clear();
  overflowed_ = false;
  stood_at_start_ = state_.has_error();
  active_ = !disabled_ && settings_.enabled();
  guard_->start_batch(false);
  if (!active_) {
    // Nothing here checks this batch, so nothing here holds its update: it
    // is applied. Said now, so that a follower holding its own (its checks
    // tripped) is answered before this rank's next collective, not at a
    // boundary that collective would keep it from reaching.
    decide(false);
    return Trace::kNone;
  }
  if (!recorder_off_) {
    try {
      recorder_.begin_batch();
    } catch (const std::exception& e) {
      // Capsules (and the traced re-run, which restores one) go; the checks stay.
      recorder_off_ = true;
      if (host_.report_error) {
        host_.report_error(std::string("the flight recorder is off (no NaN capsule, no traced re-run): ") + e.what() +
                           "; the numerical checks keep running");
      }
    }
  }
  if (repeat) {
    rerun_active_ = true;
    rerun_tripped_ = false;
    return Trace::kCapture;
  }
  if (settings_.trace_interval_batches() > 0 && ++since_trace_ >= settings_.trace_interval_batches()) {
    since_trace_ = 0;
    return Trace::kOps;
  }
  return Trace::kNone;
}

void Monitor::begin_batch(capture::Tracer* tracer, Trace trace, observer::Observer* observer) {
  if (!active_) return;
  tracer_ = tracer;
  traced_ = observer && (tracer != nullptr || trace != Trace::kNone);
  // Traced batches are checked whatever the interval: they cost far more anyway.
  const bool checked = traced_ || ++since_check_ >= settings_.interval_batches();
  if (checked && !traced_) since_check_ = 0;
  if (traced_ && settings_.check_nan_inf() && !op_tracing_off_) {
    try {
      op_tracer_ = std::make_unique<OpTracer>(
          model_, settings_.allow(),
          [this](const torch::Tensor& out) -> std::optional<std::string> {
            return tracer_ ? tracer_->layer_of(out.unsafeGetTensorImpl()) : std::nullopt;
          },
          std::vector<torch::Tensor>{}, *observer);
    } catch (const std::exception& e) {
      // The producer goes unnamed from now on; the checks stay.
      op_tracing_off_ = true;
      op_tracer_.reset();
      if (host_.report_error) {
        host_.report_error(std::string("root-cause op tracing is off (a NaN's producer op goes unnamed): it could "
                                       "not start: ") +
                           e.what() + "; the numerical checks keep running");
      }
    }
  }
  guard_->start_batch(checked && settings_.any_check());
}

void Monitor::set_item(std::vector<torch::Tensor> tensors) {
  if (!active_) return;
  if (op_tracer_) op_tracer_->set_batch(tensors);
  if (!recorder_off_) recorder_.set_item(std::move(tensors));
}

void Monitor::note_backward_roots(std::vector<torch::Tensor> roots) {
  if (!active_ || !guard_->armed()) return;
  for (auto& r : roots) {
    if (r.defined() && r.is_floating_point() && r.numel() > 0) roots_.push_back(r.detach());
  }
}

std::optional<LayerReport> Monitor::loss_row() const {
  if (roots_.empty() || !settings_.check_nan_inf()) return std::nullopt;
  int64_t n = 0, nans = 0, infs = 0;
  for (const auto& r : roots_) {
    n += r.numel();
    nans += r.isnan().sum().item<int64_t>();
    infs += r.isinf().sum().item<int64_t>();
  }
  if (nans == 0 && infs == 0) return std::nullopt;
  LayerReport row;
  row.layer = "loss";
  row.nan = static_cast<double>(nans) / static_cast<double>(n);
  row.inf = static_cast<double>(infs) / static_cast<double>(n);
  row.dtype = common::dtype_name(roots_.front().scalar_type());
  row.sources = {"loss"};
  return row;
}

std::optional<double> Monitor::read_scale() {
  if (scale_off_ || !host_.loss_scale) return std::nullopt;
  std::optional<double> scale;
  try {
    scale = host_.loss_scale();
  } catch (const std::exception& e) {
    scale_off_ = true;
    if (host_.report_error) {
      host_.report_error(std::string("the loss scaler's scale could not be read (") + e.what() +
                         "): its overflows are taken for numerical errors from now on");
    }
  }
  since_scale_read_ = 0;
  if (loss_scale_.in_use != scale.has_value() || (scale && loss_scale_.scale != scale)) {
    loss_scale_.in_use = scale.has_value();
    if (scale) loss_scale_.scale = scale;
    state_.set_loss_scale(loss_scale_);
  }
  return scale;
}

bool Monitor::scaler_overflow(DebugError& hit) {
  // Read first, whatever the hit: drop_update() must know a scaler is in use.
  const auto scale = read_scale();
  if (!scale || rerun_active_) return false;
  // The forward (activations) and the loss are not the scaler's: non-finite
  // there is an error. Scaled gradients, of weights and activations, are.
  for (const auto& row : hit.layers) {
    for (const auto& source : row.sources) {
      if ((source == "activation" || source == "loss") && (row.nan > 0 || row.inf > 0)) return false;
    }
  }
  // Scaled gradients sit near the top of their dtype's range by design (the
  // scaler grows its scale until they overflow): that band is the scaler's.
  // Subnormal ones still say the scale is too low for them.
  if (!has_nan_inf(hit.reasons)) return hit.reasons == std::vector<std::string>{"overflow"};
  overflowed_ = true;
  ++loss_scale_.skipped_steps;
  ++loss_scale_.skips_in_row;
  loss_scale_.last_skipped = position_;
  state_.set_loss_scale(loss_scale_);
  if (loss_scale_.skips_in_row >= kLossScaleCollapseSkips || *scale < kLossScaleFloor) {
    std::ostringstream how;
    how << loss_scale_.skips_in_row << " step" << (loss_scale_.skips_in_row == 1 ? "" : "s")
        << " skipped in a row, scale " << *scale;
    if (*scale < kLossScaleFloor) how << " (below " << kLossScaleFloor << ")";
    hit.loss_scale = how.str();
    return false;
  }
  if (!std::exchange(said_overflow_, true)) {
    std::cerr << "[nansense] " << position_.to_string() << ": the loss scaler's scaled gradients overflowed at scale "
              << *scale << "; it skips this step and lowers its scale, as in the first steps of most fp16 runs. "
              << "Counted (status: debug.loss_scale), not an error; a collapse is: " << kLossScaleCollapseSkips
              << " skipped steps in a row, or a scale below " << kLossScaleFloor << "\n";
  }
  return true;
}

void Monitor::drop_update() {
  if (loss_scale_.in_use) {
    for (auto& [_, p] : params_) {
      if (p.grad().defined()) p.mutable_grad().fill_(std::numeric_limits<double>::quiet_NaN());
    }
    return;
  }
  for (auto& [_, p] : params_) p.mutable_grad().reset();
}

void Monitor::on_backward_end() {
  ++backwards_;
  if (!active_ || tripped_) return;
  // Where the gradients are averaged inside backward, a trip found here
  // stops the batch only once the averaged ones are in .grad: DDP writes
  // them after this callback, over a pause's choice to skip the update.
  deferring_ = after_reduction_ && guard_->run_after_others();
  try {
    checked_in_backward_ = true;
    if (op_tracer_) op_tracer_->mark_backward_done();
    state_.note_checked();
    if (auto hit = check(/*gradients=*/true)) {
      if (!scaler_overflow(*hit)) handle_hit(std::move(*hit), /*in_backward=*/true);
    } else if (loss_scale_.skips_in_row > 0) {
      loss_scale_.skips_in_row = 0;
      state_.set_loss_scale(loss_scale_);
    }
  } catch (const std::exception& e) {
    deferring_ = false;
    fail(std::string("the gradient check failed: ") + e.what());
    return;
  } catch (...) {
    deferring_ = false;
    fail("the gradient check failed");
    return;
  }
  if (std::exchange(deferring_, false)) return;  // after_reduction() goes on
  settle();
}

void Monitor::after_reduction() {
  if (!active_) return;
  if (std::exchange(deferred_pause_, false)) {
    pause_now(/*in_backward=*/true);
    decide(false);  // unless that pause decided it (it may wait for the batch's end): applied
    return;
  }
  if (tripped_) {  // merged into the standing error, which does not pause again
    decide(false);
    return;
  }
  try {
    if (auto hit = check(/*gradients=*/true)) {
      if (has_nan_inf(hit->reasons)) {
        hit->root_cause = cause_of(RootCause::Status::kFromOutside,
                                   "this rank's own gradients were finite: the non-finite values came in through "
                                   "the distributed run's gradient averaging (DDP's all-reduce), from a rank whose "
                                   "own gradients were not");
      }
      handle_hit(std::move(*hit), /*in_backward=*/true, /*own=*/false);
    }
  } catch (const std::exception& e) {
    fail(std::string("the check of the averaged gradients failed: ") + e.what());
  } catch (...) {
    fail("the check of the averaged gradients failed");
  }
  decide(false);  // where no pause decided it
  if (active_) settle();
}

void Monitor::decide(bool skipped) {
  if (std::exchange(decided_, true) || !host_.update_decided) return;
  try {
    host_.update_decided(skipped);
  } catch (...) {
    // The host's work (telling other ranks) has failed on its own terms.
  }
}

void Monitor::settle() {
  // One backward a batch, as in the batch before (a loop with several, a
  // GAN's or gradient accumulation's, may still trip in the next): what is
  // left of the batch (the optimizer step, the loop's own code) is not
  // checked, so the batch can no longer pause for numerics.
  // (A traced re-run's batch may still pause at its end: "not reproduced".)
  if (tripped_ || pause_at_end_ || rerun_pending_ || rerun_active_ || backwards_ != 1 || last_backwards_ != 1) return;
  settled_ = true;
  if (host_.settled) {
    try {
      host_.settled();
    } catch (...) {
      // The host's work (telling other ranks) has failed on its own terms.
    }
  }
}

std::optional<DebugError> Monitor::check(bool gradients) {
  // The steady state of a clean untraced batch: one |g| sum per parameter,
  // one copy back, no names, no maps.
  if (gradients && !tracer_ && !(op_tracer_ && op_tracer_->saw_non_finite())) {
    std::vector<torch::Tensor> grads;
    grads.reserve(params_.size());
    for (const auto& [name, p] : params_) {
      const auto& g = p.grad();
      if (g.defined() && g.is_floating_point() && g.numel() > 0 &&
          (unchecked_.empty() || !unchecked_.count(unchecked_key("weight_gradient", name)))) {
        grads.push_back(g);
      }
    }
    // The loss in the same copy back: one sync for all.
    const size_t gradient_count = grads.size();
    if (settings_.check_nan_inf()) grads.insert(grads.end(), roots_.begin(), roots_.end());
    const auto sums = abs_sums_each(grads, nullptr);
    bool any = false;
    for (size_t i = 0; i < grads.size() && !any; ++i) {
      // A sum that threw: the full check below names the tensor and turns it off.
      any = !sums[i] || (i < gradient_count ? suspicious(*sums[i], grads[i].numel(), grads[i].scalar_type(),
                                                         settings_.check_under_over(), settings_.threshold_fraction())
                                            : !std::isfinite(*sums[i]));
    }
    if (!any) return std::nullopt;
  }
  CheckInput in;
  std::map<std::string, std::string> owner;
  if (auto arch = host_.architecture ? host_.architecture() : nullptr) {
    for (const auto& layer : arch->layers) {
      in.layer_order.push_back(layer.name);
      for (const auto& p : layer.parameters) owner.emplace(p, layer.name);
    }
  }
  if (gradients) {
    for (const auto& [name, p] : params_) {
      const auto& g = p.grad();
      if (g.defined() && g.is_floating_point() && g.numel() > 0) {
        in.weight_gradients.emplace_back(layer_of_parameter(name, owner), g);
        in.weight_gradient_names.push_back(name);
      }
    }
  }
  std::shared_ptr<capture::TraceResult> trace = tracer_ ? tracer_->result() : nullptr;
  std::map<std::string, torch::Tensor> activations, activation_gradients;
  std::map<std::string, TensorStats> activation_stats, activation_gradient_stats;
  KnownAbsSums known_abs_sums;
  if (trace) {
    std::lock_guard lock(trace->grad_mu);
    activations = trace->activations;
    activation_gradients = trace->gradients;
    for (const auto* copies : {&activations, &activation_gradients}) {
      for (const auto& [_, copy] : *copies) {
        if (auto sum = trace->copied_abs_sum(copy)) known_abs_sums.emplace(copy.unsafeGetTensorImpl(), *sum);
      }
    }
    in.known_abs_sums = &known_abs_sums;
    activation_stats = trace->activation_stats;
    activation_gradient_stats = trace->gradient_stats;
    in.activations = &activations;
    in.activation_stats = &activation_stats;
    in.activation_gradient_stats = &activation_gradient_stats;
    // Mid-batch the capture holds its tensors under provisional names.
    in.layer_order = trace->layer_names;
    in.activation_gradients = &activation_gradients;
    if (op_tracer_) in.intended_activations = op_tracer_->intended_layers();
  }
  in.unchecked = unchecked_;
  auto result = run_checks(settings_, in);
  for (auto& failed : result.failed) turn_off(std::move(failed));
  DebugError e;
  e.position = position_;
  if (host_.trainer_step) e.trainer_step = host_.trainer_step();
  e.reasons = result.reasons;
  e.checks_used = result.checks_used;
  e.layers = std::move(result.layers);
  if (gradients) {
    if (auto row = loss_row()) {
      if (row->nan > 0) add_reason(e.reasons, "nan");
      if (row->inf > 0) add_reason(e.reasons, "inf");
      if (std::find(e.checks_used.begin(), e.checks_used.end(), kNanInf) == e.checks_used.end()) {
        e.checks_used.insert(e.checks_used.begin(), kNanInf);
      }
      e.layers.push_back(std::move(*row));
    }
  }
  if (op_tracer_ && settings_.check_nan_inf() && op_tracer_->saw_non_finite()) {
    if (op_tracer_->saw_nan()) add_reason(e.reasons, "nan");
    if (op_tracer_->saw_inf()) add_reason(e.reasons, "inf");
  }
  if (e.reasons.empty()) return std::nullopt;
  // The names the published graph will use, not the capture's provisional ones.
  OpTracer::Rename rename;
  if (tracer_) rename = [tracer = tracer_](const std::string& name) { return tracer->final_name(name); };
  if (rename) {
    for (auto& layer : e.layers) layer.layer = rename(layer.layer);
  }
  if (op_tracer_ && has_nan_inf(e.reasons)) e.root_cause = op_tracer_->result(rename);
  return e;
}

state::LiveState Monitor::live_state() const {
  return {&model_, optimizers_, host_.scheduler ? host_.scheduler() : nullptr};
}

std::string Monitor::write_capsule(const DebugError& hit) {
  capsule_.reset();
  if (recorder_off_) return "";
  try {
    auto in = recorder_.capsule_input(live_state());
    in.position = position_;
    in.settings = settings_;
    in.error = to_json(hit);
    capsule_ = make_capsule(in);
    if (settings_.capsule_dir().empty()) return "";
    const auto path = capsule_path(settings_.capsule_dir(), position_);
    state::write_state_file(path, *capsule_);
    return path;
  } catch (const std::exception& e) {
    if (host_.report_error) host_.report_error(std::string("the NaN capsule was not written: ") + e.what());
    return "";
  }
}

void Monitor::handle_hit(DebugError hit, bool in_backward, bool own) {
  tripped_ = true;
  auto log = [&](const DebugError& e) {
    std::cerr << "[nansense] " << headline(e);
    if (e.root_cause) std::cerr << " — " << e.root_cause->summary;
    if (e.rerun) std::cerr << " — re-run traced: " << (host_.rerun_note ? host_.rerun_note() : RerunNote()).ran_twice;
    if (!e.capsule.empty()) std::cerr << " — capsule: " << e.capsule;
    if (!host_.can_pause()) {
      std::cerr << " (no UI served: " << (host_.unserved_note ? host_.unserved_note() : "training continues") << ")";
    }
    std::cerr << "\n";
  };
  if (rerun_active_) {
    // The traced re-run of the first hit: its root cause completes the record.
    rerun_tripped_ = true;
    hit.hits = 0;  // the same batch, run again
    state_.record(hit);
    if (auto standing = state_.error()) log(*standing);
    pause_now(in_backward);
    return;
  }
  // What a peer's note said of this batch before its checks ran here.
  std::optional<DebugError> noted;
  const bool from_peer = peer_noted_.exchange(false);
  if (auto standing = state_.error()) {
    if ((!stood_at_start_ || from_peer) && standing->position.same_batch(hit.position)) {
      // Recorded in this batch before its own checks found anything: another
      // rank's trip, noted while this one's backward ran, or before this
      // batch began here (a distributed run). This finding takes its place,
      // keeps what it said, and pauses.
      noted = std::move(standing);
    } else if (!differs(*standing, hit)) {
      state_.record(hit);  // the same problem again: merges without pausing
      return;
    }
    // A new problem while a warning stands (NaN after an intended Inf, another
    // producer op): it takes the warning's place and pauses.
    state_.clear();
  }
  auto record = [&] {
    if (noted) {
      if (noted->root_cause && !noted->root_cause->summary.empty()) {
        if (!hit.root_cause) hit.root_cause = RootCause{};
        auto& summary = hit.root_cause->summary;
        summary += (summary.empty() ? "" : " ") + noted->root_cause->summary;
      }
      if (hit.capsule.empty()) hit.capsule = noted->capsule;
    }
    state_.record(hit);
  };
  standing_in_average_ = !own;
  if (own) {
    hit.capsule = write_capsule(hit);
  } else {
    capsule_.reset();  // this rank's batch replays finite: no capsule, no re-run
  }
  const bool nan_inf = has_nan_inf(hit.reasons);
  if (!traced_ && nan_inf && settings_.rerun_to_trace() && in_backward && capsule_) {
    hit.root_cause = cause_of(RootCause::Status::kPending,
                              "this batch was not traced: it runs again from the recorded state (weights, "
                              "buffers, optimizer and scheduler state, RNG), traced, to name the producer; your "
                              "loop body runs it a second time");
    record();
    rerun_pending_ = true;
    // This run's optimizer step is undone by the re-run's restore, but an
    // optimizer the engine cannot restore (a Python one's momentum, Adam's
    // moments) would keep what NaN gradients did to it: without gradients
    // the step changes nothing.
    if (std::this_thread::get_id() == training_thread_) drop_update();
    tripped_compiled_ = host_.compiled && host_.compiled();
    return;
  }
  if (nan_inf && !hit.root_cause) {
    hit.root_cause = cause_of(RootCause::Status::kNotTraced,
                              "this batch was not traced: step to it with the UI, set trace_interval, or turn "
                              "rerun_to_trace on to name the producer");
  }
  record();
  log(hit);
  pause_now(in_backward);
}

void Monitor::pause_now(bool in_backward) {
  if (deferring_) {
    deferred_pause_ = true;  // once the averaged gradients are in
    return;
  }
  if (!host_.can_pause()) {
    if (in_backward) await_leader();
    return;
  }
  if (!in_backward || std::this_thread::get_id() != training_thread_) {
    // Not on the training thread (a device's autograd thread): pause once
    // the batch ends; the capsule already holds the pre-step state.
    pause_at_end_ = true;
    return;
  }
  if (tracer_) {
    tracer_ = nullptr;
    host_.publish_capture();
  }
  // Work run inside the pause (a probe's forward and backward) is not this
  // batch: neither checked nor traced.
  guard_->set_armed(false);
  if (op_tracer_) op_tracer_->stop();
  // Paused before the optimizer step: the user may skip the poisoned update.
  state_.amend([](DebugError& e) { e.update = "held"; });
  host_.pause();
  const bool skipped = state_.release_update();
  // Optimizers skip a parameter without a gradient (a loss scaler skips the
  // step on NaN ones): no weight, moment or step count changes for this batch.
  if (skipped) drop_update();
  decide(skipped);
}

void Monitor::await_leader() {
  if (!host_.await_leader) return;
  std::optional<bool> skip;
  try {
    skip = host_.await_leader();
  } catch (...) {
    // The wait failed (the run was lost): the loop goes on, and its next
    // boundary says why.
  }
  if (!skip) return;  // no leader to wait for
  state_.amend([&](DebugError& e) { e.update = *skip ? "skipped" : "applied"; });
  if (*skip) drop_update();
  decide(*skip);
}

Monitor::End Monitor::end_batch(bool can_repeat) {
  End out;
  if (!active_) return out;
  // The loop's update() has run: the scale after an overflow, and now and
  // then for the Stats page's series (a read may sync with the device).
  if (host_.loss_scale && !scale_off_ && (overflowed_ || ++since_scale_read_ >= 16)) {
    if (auto scale = read_scale(); scale && host_.log_scalar) {
      try {
        host_.log_scalar("loss_scale", *scale);
        host_.log_scalar("skipped_steps", static_cast<double>(loss_scale_.skipped_steps));
      } catch (const std::exception&) {
        // The series misses a point; the counts stand.
      }
    }
  }
  try {
    if (op_tracer_) op_tracer_->stop();
    if (!checked_in_backward_ && !tripped_ && traced_ && settings_.any_check()) {
      state_.note_checked();
      if (auto hit = check(/*gradients=*/false)) handle_hit(std::move(*hit), /*in_backward=*/false);
    }
    if (rerun_active_) {
      rerun_active_ = false;
      if (!rerun_tripped_) {
        // The first run went non-finite, the traced (eager) re-run did not.
        const auto status = tripped_compiled_ ? RootCause::Status::kCompiledOnly : RootCause::Status::kNotReproduced;
        const char* summary =
            tripped_compiled_
                ? "compiled-only numerics: this batch went non-finite running compiled (torch.compile), and its "
                  "eager re-run from the recorded state stayed finite, so the compiled kernels compute it "
                  "differently from PyTorch's own ops; the capsule holds the batch and the state it began from to "
                  "reproduce it (replay it compiled, or bisect with torch._dynamo's minifier)"
                : "the traced re-run of this batch from the recorded state stayed finite: the step is not "
                  "deterministic (randomness outside torch's generators, a nondeterministic kernel, or gradients "
                  "accumulated across batches), or the NaN depends on something your loop body keeps itself (a "
                  "counter, a per-batch schedule not given to start()), which saw this batch twice: "
                  "Session::rerunning() / session.rerunning is true in the second run";
        state_.amend([&](DebugError& e) {
          if (!e.root_cause || e.root_cause->status != RootCause::Status::kPending) return;
          e.root_cause->status = status;
          e.root_cause->summary = summary;
        });
        if (auto standing = state_.error(); standing && standing->root_cause) {
          std::cerr << "[nansense] " << headline(*standing) << " — " << standing->root_cause->summary << "\n";
        }
        pause_at_end_ = true;
      }
    }
    if (rerun_pending_) {
      rerun_pending_ = false;
      std::string why = "the batch was not run again to trace it (the loop left it, or cannot deliver it twice)";
      if (can_repeat) {
        try {
          restore_capsule(*capsule_, live_state());
          out.repeat = true;
          state_.amend([](DebugError& e) { e.rerun = true; });
        } catch (const std::exception& e) {
          why = std::string("the recorded state could not be restored: ") + e.what();
        }
      }
      if (!out.repeat) {
        state_.amend([&](DebugError& e) {
          if (e.root_cause && e.root_cause->status == RootCause::Status::kPending) {
            e.root_cause->status = RootCause::Status::kNotTraced;
            e.root_cause->summary = why;
          }
        });
        if (auto standing = state_.error()) {
          std::cerr << "[nansense] " << headline(*standing) << " — " << why << "\n";
        }
        pause_at_end_ = true;
      }
    }
  } catch (const std::exception& e) {
    fail(std::string("the end-of-batch check failed: ") + e.what());
  }
  out.pause = pause_at_end_ && !out.repeat && host_.can_pause();
  op_tracer_.reset();
  tracer_ = nullptr;
  traced_ = false;
  guard_->start_batch(false);
  return out;
}

void Monitor::abandon() {
  op_tracer_.reset();
  tracer_ = nullptr;
  traced_ = false;
  rerun_pending_ = rerun_active_ = false;
  guard_->start_batch(false);
}

}  // namespace nansense::numerics
