// The controller's probes on the paused model (controller_probes.cpp): the
// pinned batch re-run in another mode or with perturbed inputs. Validation
// is the probes' (experiments/probe.h); this area names inputs and shows
// the state as JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::experiments {
class Probes;
struct ProbeSettings;
}  // namespace nansense::experiments

namespace nansense::server {

class ProbeArea {
 public:
  explicit ProbeArea(detail::SessionPort& session);

  using Wait = std::chrono::milliseconds;
  // Pinned batch (and where), forward mode, perturbations (input by name),
  // runs completed, whether one is pending, the newest result (run, the
  // batch re-run, diff, layers) or its error, and a hint. While a probe is
  // active the snapshot every query and picture reads is the probe's result.
  json get_probe_status() const;
  // Each change returns get_probe_status() once the probe's next run
  // finished or `wait` passed (then "pending": true). Refusals: kConflict
  // while the loop runs or after it ended, with nothing captured, or (unpin)
  // with nothing pinned; kInvalidArgument for a perturbation that does not
  // fit the input, saying what does.
  json pin_batch(Wait wait);
  json unpin_batch(Wait wait);
  json set_probe_mode(const std::string& mode, Wait wait);
  // `input`: a model input's name (the first when nullopt).
  json add_perturbation(const std::vector<int64_t>& index, const std::vector<double>& values, int64_t sample,
                        const std::optional<std::string>& input, Wait wait);
  // Adds "cleared": how many.
  json clear_perturbations(Wait wait);

 private:
  // get_probe_status() once a run of `probes` with their current settings
  // finished (or `wait` passed).
  json probe_reply(const experiments::Probes& probes, Wait wait) const;
  // The probes the calling visitor's probe commands and status use: on a
  // locked session the visitor's own (null when it has none yet), else the
  // session's one shared state.
  std::shared_ptr<experiments::Probes> caller_probes() const;
  // Applies `change` to the caller's probes (made on first use on a locked
  // session) and returns them; `starts_run` as VisitorProbes::change says.
  // Refused on a locked session without a visitor (VisitorScope).
  std::shared_ptr<experiments::Probes> change_probes(
      const std::function<bool(const experiments::ProbeSettings&)>& starts_run,
      const std::function<void(experiments::Probes&)>& change);

  detail::SessionPort& session_;
};

}  // namespace nansense::server
