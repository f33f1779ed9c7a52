// The engine seen through the port: each method forwards to the part that
// owns it (run control, the numerics state, the time-travel restorer).
#include "session/session_port.h"

#include "session/session_access.h"

namespace nansense::detail {

namespace {

class CorePort final : public SessionPort {
 public:
  explicit CorePort(SessionCore& core) : core_(core) {}

  RunState state() const override { return core_.control().state(); }
  Mode mode() const override { return core_.control().mode(); }
  std::optional<std::chrono::system_clock::time_point> paused_since() const override {
    return core_.control().paused_since();
  }
  std::string lost_reason() const override { return core_.control().lost_reason(); }
  std::optional<BatchPosition> live_position() const override { return core_.live_position(); }
  std::optional<TrainerStep> trainer_step() const override { return core_.trainer_step(); }
  const Schedule& schedule() const override { return core_.schedule(); }
  std::vector<std::string> internal_errors() const override { return core_.internal_errors(); }
  std::shared_ptr<const BatchSnapshot> snapshot() const override { return core_.shown_snapshot(); }
  std::shared_ptr<const Architecture> architecture() const override { return core_.architecture(); }
  bool locked() const override { return core_.locked(); }
  std::string front_end() const override { return core_.front_end(); }

  void step_batch() override { core_.control().step_batch(); }
  void step_phase() override { core_.control().step_phase(); }
  void step_epoch() override { core_.control().step_epoch(); }
  void run_until(const BatchPosition& target) override { core_.control().run_until(target); }
  void run() override { core_.control().run(); }
  void detach() override { core_.control().detach(); }
  void pause() override { core_.control().pause(); }
  void refresh() override { core_.control().refresh(); }
  RunState wait_until_stopped(std::chrono::milliseconds timeout) const override {
    return core_.control().wait_until_stopped(timeout);
  }
  bool wait_for_snapshot_after(uint64_t sequence, std::chrono::milliseconds timeout) const override {
    return core_.wait_for_snapshot_after(sequence, timeout);
  }
  uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const override {
    return core_.control().wait_for_change(seen, timeout);
  }
  void notify_changed() override { core_.control().notify_changed(); }

  Submitted submit_experiment(const std::string& kind, const std::string& layer, const common::json& params) override {
    return core_.experiments().submit(kind, layer, params);
  }
  std::shared_ptr<const experiments::Result> experiment_result(uint64_t seq) const override {
    return core_.experiments().result(seq);
  }
  std::shared_ptr<const experiments::Result> wait_for_experiment(uint64_t seq,
                                                                 std::chrono::milliseconds timeout) const override {
    return core_.experiments().wait(seq, timeout);
  }
  std::optional<int64_t> experiment_queued_ahead(uint64_t seq) const override {
    return core_.experiments().queued_ahead(seq);
  }
  std::vector<uint64_t> kept_experiments() const override { return core_.experiments().kept(); }
  std::shared_ptr<const experiments::Result> latest_finished_experiment(
      const std::function<bool(const experiments::Result&)>& which) const override {
    return core_.experiments().latest_finished(which);
  }
  int cancel_experiments(std::optional<uint64_t> seq) override { return core_.experiments().cancel(seq); }
  bool auto_run_experiments() const override { return core_.experiments().auto_run(); }
  void set_auto_run_experiments(bool on) override { core_.experiments().set_auto_run(on); }
  common::json experiment_defaults() const override { return core_.experiments().defaults(); }
  std::vector<std::string> set_experiment_defaults(const std::string& kind, const common::json& params) override {
    return core_.experiments().set_defaults(kind, params);
  }
  double experiment_time_limit_seconds() const override { return core_.experiments().time_limit_seconds(); }
  bool experiment_forward_known() const override { return core_.experiments().has_forward(); }
  Submitted set_auto_experiment(const std::string& tab, const std::string& kind, const std::string& layer,
                                const common::json& params, bool pinned) override {
    return core_.experiments().set_auto(tab, kind, layer, params, experiments::Engine::Clock::now(), pinned);
  }
  bool clear_auto_experiment(const std::string& tab) override { return core_.experiments().clear_auto(tab); }
  std::vector<experiments::AutoRuns::Entry> auto_experiments() override {
    return core_.experiments().auto_entries(experiments::Engine::Clock::now());
  }
  experiments::Engine::Changes experiment_changes_since(uint64_t version) const override {
    return core_.experiments().changes_since(version);
  }

  std::optional<ProbeView> probe_view(const ProbeOwner& owner) const override {
    auto probes = owned_probes(owner);
    if (!probes) return std::nullopt;
    return ProbeView{probes->settings(), probes->runs_completed(), probes->pending(), probes->result()};
  }
  ProbeChanged change_probe(const ProbeOwner& owner, const ProbeChange& change) override {
    ProbeChanged out;
    const auto apply = [&](experiments::Probes& p) {
      switch (change.kind) {
        case ProbeChange::Kind::kPin:
          p.pin();
          break;
        case ProbeChange::Kind::kUnpin:
          out.unpinned = p.unpin();
          break;
        case ProbeChange::Kind::kSetMode:
          p.set_mode(change.mode);
          break;
        case ProbeChange::Kind::kAddPerturbation:
          p.add_perturbation(change.perturbation);
          break;
        case ProbeChange::Kind::kClearPerturbations:
          out.cleared = p.clear_perturbations();
          break;
      }
    };
    std::shared_ptr<experiments::Probes> probes;
    if (!owner) {
      apply(core_.probes());
      out.settings_generation = core_.probes().settings_generation();
      return out;
    }
    probes = core_.visitor_probes().change(
        *owner, [&](const experiments::ProbeSettings& s) { return starts_run(change, s); }, apply);
    out.settings_generation = probes->settings_generation();
    return out;
  }
  void wait_for_probe(const ProbeOwner& owner, uint64_t generation, std::chrono::milliseconds timeout) const override {
    if (auto probes = owned_probes(owner)) probes->wait_for_settings(generation, timeout);
  }
  std::shared_ptr<const BatchSnapshot> visitor_snapshot(const std::string& visitor,
                                                        const std::shared_ptr<const BatchSnapshot>& live) override {
    return core_.visitor_probes().shown(visitor, live);
  }
  size_t probe_runs_in_flight_limit() const override { return core_.visitor_probes().limits().runs_in_flight; }

  DebugSettings debug_settings() const override { return core_.debug().settings(); }
  void set_debug_settings(const DebugSettings& settings) override {
    core_.debug().set_settings(core_.settings_for_rank(settings));
  }
  std::optional<DebugError> debug_error() const override { return core_.debug().error(); }
  int64_t checked_batches() const override { return core_.debug().checked_batches(); }
  LossScaleStatus loss_scale() const override { return core_.debug().loss_scale(); }
  std::vector<numerics::UncheckedTensor> unchecked_tensors() const override { return core_.debug().unchecked(); }
  numerics::RerunNote rerun_note() const override { return core_.rerun_note(); }
  bool skip_update_chosen() const override { return core_.debug().skip_chosen(); }
  std::string skip_refused() const override { return core_.debug().skip_refused(); }
  void choose_update(bool skip) override { core_.debug().choose_update(skip); }
  void disable_debug_check(const std::string& category) override { core_.debug().silence(category); }
  void clear_debug_error() override { core_.debug().clear(); }

  StatsScope stats_scope() const override { return core_.stats().scope(); }
  void set_stats_scope(StatsScope scope) override { core_.stats().set_scope(scope); }
  std::vector<std::string> watched_layers() const override { return core_.stats().watched(); }
  void watch(const std::vector<std::string>& layers) override {
    core_.stats().watch(layers, core_.architecture().get());
  }
  void unwatch(const std::vector<std::string>& layers) override {
    core_.stats().unwatch(layers, core_.architecture().get());
  }
  bool stats_collecting() const override { return core_.stats().collecting(); }
  UpdateFrequency update_frequency() const override { return core_.control().update_frequency(); }
  void set_update_frequency(const UpdateFrequency& frequency) override {
    core_.control().set_update_frequency(frequency);
  }
  WatchPerformance watch_performance() const override { return core_.stats().performance(); }
  bool set_watch_performance(const WatchPerformance& performance) override {
    return core_.stats().set_performance(performance);
  }
  std::optional<std::vector<std::string>> patch_layers() const override { return core_.stats().patch_layers(); }
  void set_patch_layers(const std::optional<std::vector<std::string>>& layers) override {
    core_.stats().set_patch_layers(layers, core_.architecture().get());
  }
  std::shared_ptr<const WatchSnapshot> watch_snapshot() const override { return core_.stats().snapshot(); }
  std::vector<FailedInstrument> instrument_errors() const override { return core_.stats().instrument_errors(); }

  TimeTravelStatus time_travel_status() const override { return core_.restorer().status(); }
  std::map<int64_t, uint64_t> checkpoint_sizes() const override { return core_.restorer().checkpoint_sizes(); }
  void request_time_travel(int64_t epoch) override { core_.request_time_travel(epoch); }

  const ServeOptions& display_options() const override { return core_.display_options(); }
  void set_display_options(const ServeOptions& options) override { core_.set_display_options(options); }
  bool attached() const override { return core_.attached(); }
  void attach(std::unique_ptr<Attachment> transport) override { core_.attach(std::move(transport)); }
  std::string url() const override { return core_.url(); }
  std::string unserved_reason() const override { return core_.unserved_reason(); }

 private:
  // `owner`'s probes: the session's shared ones, or a visitor's (null when
  // it has none).
  std::shared_ptr<experiments::Probes> owned_probes(const ProbeOwner& owner) const {
    // Aliasing: the session owns its one shared probe state.
    if (!owner) return std::shared_ptr<experiments::Probes>(std::shared_ptr<experiments::Probes>{}, &core_.probes());
    return core_.visitor_probes().find(*owner);
  }
  // Whether `change`, given a visitor's settings before it, can start a run
  // (VisitorProbes::change bounds those); changes that end a probe cannot.
  static bool starts_run(const ProbeChange& change, const experiments::ProbeSettings& s) {
    using experiments::ProbeMode;
    switch (change.kind) {
      case ProbeChange::Kind::kPin:
      case ProbeChange::Kind::kAddPerturbation:
        return true;
      case ProbeChange::Kind::kUnpin:
        return s.mode != ProbeMode::kUnchanged || !s.perturbations.empty();
      case ProbeChange::Kind::kSetMode:
        return s.mode != change.mode && (change.mode != ProbeMode::kUnchanged || s.pinned || !s.perturbations.empty());
      case ProbeChange::Kind::kClearPerturbations:
        return s.pinned || s.mode != ProbeMode::kUnchanged;
    }
    return true;
  }

  SessionCore& core_;
};

}  // namespace

std::unique_ptr<SessionPort> make_port(SessionCore& core) { return std::make_unique<CorePort>(core); }

SessionPort* port_of(const Session& session) {
  SessionCore* core = core_of(session);
  return core ? &core->port() : nullptr;
}

}  // namespace nansense::detail
