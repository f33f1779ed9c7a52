// The controller's experiments on the paused model
// (controller_experiments.cpp): the kinds, requests and their results, the
// session's defaults and the pages' auto experiments.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"
#include "server/controller/pictures.h"
#include "server/controller/replies.h"
#include "server/controller/replies_lab.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

class Controller;

class ExperimentArea {
 public:
  ExperimentArea(Controller& owner, detail::SessionPort& session);

  using Wait = std::chrono::milliseconds;
  // Every kind with its summary, description, accepted layers (and the others
  // with the reason), parameter specs with effective defaults and ranges, and
  // the time limit.
  ExperimentList list_experiments() const;
  // Queues an experiment (params layered: the kind's defaults, the session's,
  // the caller's; unknown keys come back in ignored_params) and waits up to
  // `wait` for it to finish. Refusals name the unknown kind or layer, the bad
  // parameter, or say to pause first. (With video: RecordingArea's
  // run_experiment_video.)
  ExperimentResult run_experiment(const std::string& kind, const std::string& layer, const json& params, Wait wait);
  // Request `seq` after waiting up to `wait` for it (0: as it stands): its
  // result, or once it left the 8 kept, stage "absent" with what was asked
  // (`kind`, `layer`, the resolved `params`).
  ExperimentResult request_result(uint64_t seq, const std::string& kind, const std::string& layer, const json& params,
                                  Wait wait) const;
  // Progress or outcome; kNotFound once it left the 8 kept.
  ExperimentResult get_experiment_result(uint64_t seq) const;
  // One request, or every one (nullopt); {"cancelled": how many}.
  ExperimentCancel cancel_experiment(std::optional<uint64_t> seq);
  ExperimentAutoRun set_auto_run_experiments(bool enabled);
  // Replaces one kind's session defaults (layered between the kind's own and
  // a caller's params); returns get_settings() with ignored_params (the
  // unknown keys, not kept). Bad values are kInvalidArgument naming them.
  ExperimentDefaults set_experiment_defaults(const std::string& kind, const json& params);
  // A page's auto experiment, re-run at every snapshot while auto-run is on:
  // registered or renewed (its heartbeat) under the page's tab name, and
  // forgotten by clear_auto_experiment or 5 s after its last renewal.
  AutoExperiment set_auto_experiment(const std::string& tab, const std::string& kind, const std::string& layer,
                                     const json& params);
  AutoExperimentCleared clear_auto_experiment(const std::string& tab);
  // The push channel's experiment events: each result changed since
  // `version` (as get_experiment_result shows it, less the objective
  // history); `version` becomes the current one.
  std::vector<ExperimentResult> experiment_changes(uint64_t& version) const;
  std::shared_ptr<const ExperimentPicture> render_experiment(uint64_t seq, bool overlay) const;

 private:
  Controller& owner_;
  detail::SessionPort& session_;
};

}  // namespace nansense::server
