// Session's statistics-over-time methods: settings forward to the parts that
// own them (run control's cadence, the stats collector).
#include "nansense/errors.h"
#include "nansense/session.h"
#include "session/session_core.h"

namespace nansense {

void Session::watch(const std::vector<std::string>& layers) {
  if (core_ && !core_->locked()) core_->stats().watch(layers, core_->architecture().get());
}
void Session::unwatch(const std::vector<std::string>& layers) {
  if (core_ && !core_->locked()) core_->stats().unwatch(layers, core_->architecture().get());
}
std::vector<std::string> Session::watched_layers() const {
  return core_ ? core_->stats().watched() : std::vector<std::string>{};
}
void Session::set_stats_scope(StatsScope scope) {
  if (core_ && !core_->locked()) core_->stats().set_scope(scope);
}
StatsScope Session::stats_scope() const { return core_ ? core_->stats().scope() : StatsScope::kNone; }
void Session::set_update_frequency(const UpdateFrequency& frequency) {
  if (core_ && !core_->locked()) core_->control().set_update_frequency(frequency);
}
UpdateFrequency Session::update_frequency() const {
  return core_ ? core_->control().update_frequency() : UpdateFrequency();
}
bool Session::set_watch_performance(const WatchPerformance& performance) {
  return core_ && !core_->locked() ? core_->stats().set_performance(performance) : false;
}
WatchPerformance Session::watch_performance() const {
  return core_ ? core_->stats().performance() : WatchPerformance();
}
void Session::set_patch_layers(const std::optional<std::vector<std::string>>& layers) {
  if (core_ && !core_->locked()) core_->stats().set_patch_layers(layers, core_->architecture().get());
}
std::optional<std::vector<std::string>> Session::patch_layers() const {
  return core_ ? core_->stats().patch_layers() : std::nullopt;
}
void Session::log_scalar(const std::string& name, double value) {
  if (core_) core_->log_scalar(name, value);
}
namespace {
void refuse_if_locked(const detail::SessionCore& core, const std::string& what, const std::string& name) {
  if (core.locked()) {
    throw UsageError(what + "(\"" + name +
                     "\") on a locked session: register instruments, like every setting, before lock()");
  }
}
}  // namespace

void Session::watch_metric(const std::string& name, MetricFn fn, MetricOn on, MetricReduce reduce) {
  if (core_) refuse_if_locked(*core_, "watch_metric", name);
  if (core_) core_->stats().add_metric(name, std::move(fn), on, reduce);
}
void Session::watch_layer_tensor(const std::string& name, LayerTensorFn fn) {
  if (!core_) return;
  refuse_if_locked(*core_, "watch_layer_tensor", name);
  if (!fn) throw UsageError("watch_layer_tensor(\"" + name + "\") needs a function, got an empty one");
  core_->stats().add_tensor_instrument(name, std::move(fn), nullptr);
}
void Session::watch_weight_tensor(const std::string& name, WeightTensorFn fn) {
  if (!core_) return;
  refuse_if_locked(*core_, "watch_weight_tensor", name);
  if (!fn) throw UsageError("watch_weight_tensor(\"" + name + "\") needs a function, got an empty one");
  core_->stats().add_tensor_instrument(name, nullptr, std::move(fn));
}
std::vector<FailedInstrument> Session::instrument_errors() const {
  return core_ ? core_->stats().instrument_errors() : std::vector<FailedInstrument>{};
}
std::shared_ptr<const WatchSnapshot> Session::watch_snapshot() const {
  return core_ ? core_->stats().snapshot() : nullptr;
}

}  // namespace nansense
