#include "numerics/debug_state.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace nansense::numerics {

namespace {

void add_unique(std::vector<std::string>& to, const std::vector<std::string>& from) {
  for (const auto& s : from) {
    if (std::find(to.begin(), to.end(), s) == to.end()) to.push_back(s);
  }
}

// Keeps the canonical order so that reasons read the same in every view.
void sort_by(std::vector<std::string>& v, const std::vector<std::string>& order) {
  std::stable_sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
    auto ia = std::find(order.begin(), order.end(), a) - order.begin();
    auto ib = std::find(order.begin(), order.end(), b) - order.begin();
    return ia < ib;
  });
}

const std::vector<std::string>& reason_order() {
  static const std::vector<std::string> order = {"nan", "inf", "underflow", "overflow"};
  return order;
}

}  // namespace

std::string category_of(const std::string& reason) {
  return reason == "underflow" || reason == "overflow" ? kUnderOver : kNanInf;
}

void validate(const DebugSettings& s) {
  if (s.interval_batches() < 1) {
    throw ArgumentError("interval_batches must be a whole number of batches >= 1, got " +
                        std::to_string(s.interval_batches()));
  }
  if (!(std::isfinite(s.threshold_fraction()) && s.threshold_fraction() > 0 && s.threshold_fraction() <= 1)) {
    throw ArgumentError("threshold_fraction must be a fraction in (0, 1], got " +
                        std::to_string(s.threshold_fraction()));
  }
  if (s.trace_interval_batches() < 0) {
    throw ArgumentError("trace_interval_batches must be 0 (off) or a number of batches >= 1, got " +
                        std::to_string(s.trace_interval_batches()));
  }
  for (const auto& entry : s.allow()) {
    if (entry.empty()) throw ArgumentError("allow entries must be op or layer names, got an empty string");
  }
}

void merge_into(DebugError& standing, const DebugError& hit) {
  add_unique(standing.reasons, hit.reasons);
  sort_by(standing.reasons, reason_order());
  add_unique(standing.checks_used, hit.checks_used);
  sort_by(standing.checks_used, {kNanInf, kUnderOver});
  for (const auto& row : hit.layers) {
    auto it = std::find_if(standing.layers.begin(), standing.layers.end(),
                           [&](const LayerReport& r) { return r.layer == row.layer; });
    if (it == standing.layers.end()) {
      standing.layers.push_back(row);
      continue;
    }
    it->nan = std::max(it->nan, row.nan);
    it->inf = std::max(it->inf, row.inf);
    it->underflow = std::max(it->underflow, row.underflow);
    it->overflow = std::max(it->overflow, row.overflow);
    if (!it->dtype) it->dtype = row.dtype;
    add_unique(it->sources, row.sources);
  }
  const bool missing_cause = !standing.root_cause || standing.root_cause->status == RootCause::Status::kPending ||
                             standing.root_cause->status == RootCause::Status::kNotTraced;
  if (hit.root_cause && missing_cause && standing.position.same_batch(hit.position)) {
    standing.root_cause = hit.root_cause;
  }
  if (standing.capsule.empty()) standing.capsule = hit.capsule;
  if (standing.loss_scale.empty()) standing.loss_scale = hit.loss_scale;
  standing.hits += hit.hits;
}

DebugState::DebugState(DebugSettings settings, std::function<void()> changed)
    : settings_(std::move(settings)), changed_(std::move(changed)) {
  validate(settings_);
}

void DebugState::notify() {
  if (changed_) changed_();
}

DebugSettings DebugState::settings() const {
  std::lock_guard lock(mu_);
  return settings_;
}

void DebugState::set_settings(const DebugSettings& settings) {
  validate(settings);
  {
    std::lock_guard lock(mu_);
    settings_ = settings;
  }
  notify();
}

std::optional<DebugError> DebugState::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

bool DebugState::has_error() const {
  std::lock_guard lock(mu_);
  return error_.has_value();
}

bool DebugState::record(const DebugError& hit) {
  bool first = false;
  {
    std::lock_guard lock(mu_);
    if (!error_) {
      error_ = hit;
      first = true;
    } else {
      merge_into(*error_, hit);
    }
  }
  notify();
  return first;
}

void DebugState::amend(const std::function<void(DebugError&)>& edit) {
  {
    std::lock_guard lock(mu_);
    if (!error_) return;
    edit(*error_);
  }
  notify();
}

std::vector<std::string> DebugState::silence(const std::string& category) {
  if (!category.empty() && category != kNanInf && category != kUnderOver) {
    throw ArgumentError("category must be \"nan_inf\" or \"under_over\", got \"" + category + "\"");
  }
  std::vector<std::string> silenced;
  {
    std::lock_guard lock(mu_);
    if (category.empty()) {
      if (error_) {
        for (const auto& r : error_->reasons) add_unique(silenced, {category_of(r)});
      }
    } else {
      silenced.push_back(category);
    }
    for (const auto& c : silenced) {
      if (c == kNanInf) settings_.check_nan_inf(false);
      if (c == kUnderOver) settings_.check_under_over(false);
    }
    if (error_) {
      auto& reasons = error_->reasons;
      reasons.erase(std::remove_if(reasons.begin(), reasons.end(),
                                   [&](const std::string& r) {
                                     return std::find(silenced.begin(), silenced.end(), category_of(r)) !=
                                            silenced.end();
                                   }),
                    reasons.end());
      if (reasons.empty()) {
        error_.reset();
      } else {
        for (auto& row : error_->layers) {
          for (const auto& c : silenced) {
            if (c == kNanInf) row.nan = row.inf = 0;
            if (c == kUnderOver) row.underflow = row.overflow = 0;
          }
        }
        auto& rows = error_->layers;
        rows.erase(std::remove_if(rows.begin(), rows.end(),
                                  [](const LayerReport& r) {
                                    return r.nan == 0 && r.inf == 0 && r.underflow == 0 && r.overflow == 0;
                                  }),
                   rows.end());
      }
    }
  }
  notify();
  return silenced;
}

void DebugState::clear() {
  {
    std::lock_guard lock(mu_);
    error_.reset();
  }
  notify();
}

void DebugState::note_checked() {
  std::lock_guard lock(mu_);
  ++checked_;
}

int64_t DebugState::checked_batches() const {
  std::lock_guard lock(mu_);
  return checked_;
}

void DebugState::note_unchecked(const UncheckedTensor& tensor) {
  {
    std::lock_guard lock(mu_);
    unchecked_.push_back(tensor);
  }
  notify();
}

std::vector<UncheckedTensor> DebugState::unchecked() const {
  std::lock_guard lock(mu_);
  return unchecked_;
}

void DebugState::choose_update(bool skip) {
  {
    std::lock_guard lock(mu_);
    if (!error_) throw std::logic_error("no numerical error stands, so no optimizer update is held");
    if (error_->update != "held") {
      throw std::logic_error(
          error_->update.empty()
              ? std::string("this error was found after the optimizer step: its update was already applied")
              : "the update of this error was already " + error_->update +
                    "; the choice applies only while "
                    "the loop is paused before the step");
    }
    if (skip && !skip_refused_.empty()) throw std::logic_error(skip_refused_);
    skip_update_ = skip;
  }
  notify();
}

void DebugState::refuse_skip(std::string why) {
  {
    std::lock_guard lock(mu_);
    if (skip_refused_ == why) return;
    skip_refused_ = std::move(why);
  }
  notify();  // the UI's Skip follows
}

std::string DebugState::skip_refused() const {
  std::lock_guard lock(mu_);
  return skip_refused_;
}

bool DebugState::skip_chosen() const {
  std::lock_guard lock(mu_);
  return skip_update_;
}

bool DebugState::release_update() {
  bool skip = false;
  {
    std::lock_guard lock(mu_);
    skip = std::exchange(skip_update_, false);
    if (error_ && error_->update == "held") error_->update = skip ? "skipped" : "applied";
  }
  notify();
  return skip;
}

LossScaleStatus DebugState::loss_scale() const {
  std::lock_guard lock(mu_);
  return loss_scale_;
}

void DebugState::set_loss_scale(const LossScaleStatus& status) {
  {
    std::lock_guard lock(mu_);
    loss_scale_ = status;
  }
  notify();
}

}  // namespace nansense::numerics
