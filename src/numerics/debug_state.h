// The standing numerical error and the live settings: written by the training
// thread (hits) and by any transport (settings, silence), read by all.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nansense/debug.h"
#include "nansense/errors.h"
#include "nansense/position.h"

namespace nansense::numerics {

inline constexpr const char* kNanInf = "nan_inf";
inline constexpr const char* kUnderOver = "under_over";

// A tensor the checks could not read (a layout or dtype their kernels do not
// run on: a sparse gradient's band statistics, say). Only that tensor's
// checks of that source are turned off, from then on; every other tensor
// stays checked.
struct UncheckedTensor {
  std::string source;  // "weight_gradient", "activation" or "activation_gradient"
  std::string tensor;  // the parameter's name (weight gradients) or the layer's
  std::string layer;
  std::vector<std::string> checks;  // the categories it is no longer checked for
  std::string error;                // what failed
  BatchPosition position;           // the batch where it failed (set by the monitor)
};

// "nan" / "inf" -> "nan_inf"; "underflow" / "overflow" -> "under_over".
std::string category_of(const std::string& reason);

// Throws ArgumentError naming the first bad value.
void validate(const DebugSettings& settings);

// Merges a later hit into the standing error: union of reasons and checks,
// the worst fraction per layer (new layers appended), the first position; the
// root cause and capsule of the first hit are kept, a missing one filled in.
void merge_into(DebugError& standing, const DebugError& hit);

class DebugState {
 public:
  // `changed` runs (outside the lock) whenever the error or settings change,
  // so that push transports send a fresh status.
  DebugState(DebugSettings settings, std::function<void()> changed);

  DebugSettings settings() const;
  // Validates first (ArgumentError); the training thread picks the
  // new settings up at its next batch.
  void set_settings(const DebugSettings& settings);

  std::optional<DebugError> error() const;
  bool has_error() const;
  // Records a hit. Returns true when it became the standing error (the first
  // hit since the last clear), false when it merged into one.
  bool record(const DebugError& hit);
  // Edits the standing error in place (a root cause that arrived later).
  void amend(const std::function<void(DebugError&)>& edit);
  // Turns a check category off and removes its reasons from the standing
  // error, which is cleared once no reason is left. "" silences every
  // category the standing error has. Returns the categories turned off.
  // Throws ArgumentError for an unknown category.
  std::vector<std::string> silence(const std::string& category);
  // Dismisses the standing error; checks stay as they are.
  void clear();
  // The choice for a held poisoned update (DebugError::update == "held"):
  // skip it (true) or apply it (false). Throws std::logic_error when no update
  // is held, saying why.
  void choose_update(bool skip);
  // Training thread, on resuming from the held update: whether to skip it;
  // marks the error "skipped" or "applied".
  bool release_update();
  // Whether skipping the held update is chosen.
  bool skip_chosen() const;
  // From now on choose_update(true) throws std::logic_error(why) (a
  // distributed rank: the other ranks step with the same averaged
  // gradients, so skipping the step on one rank alone would make the
  // replicas differ). "" allows skipping again. Any thread.
  void refuse_skip(std::string why);
  std::string skip_refused() const;

  // Bookkeeping shown in the report.
  void note_checked();
  int64_t checked_batches() const;
  // A tensor whose check failed (numerics/checks.h): listed in the report
  // from then on; the monitor no longer offers it to that check.
  void note_unchecked(const UncheckedTensor& tensor);
  std::vector<UncheckedTensor> unchecked() const;
  // The loss scaler's state as the monitor counts it (LossScaleStatus).
  LossScaleStatus loss_scale() const;
  void set_loss_scale(const LossScaleStatus& status);

 private:
  void notify();
  bool skip_update_ = false;
  std::string skip_refused_;  // refuse_skip()

  mutable std::mutex mu_;
  DebugSettings settings_;
  std::optional<DebugError> error_;
  int64_t checked_ = 0;
  std::vector<UncheckedTensor> unchecked_;
  LossScaleStatus loss_scale_;
  std::function<void()> changed_;
};

}  // namespace nansense::numerics
