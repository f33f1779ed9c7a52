// The controller's probes on the paused model (controller_probes.cpp): the
// pinned batch re-run in another mode or with perturbed inputs. Validation
// is the probes' (experiments/probe.h); this area names inputs and shows
// the state as JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"
#include "server/controller/replies.h"

namespace nansense::detail {
class SessionPort;
struct ProbeChange;
struct ProbeChanged;
struct ProbeView;
using ProbeOwner = std::optional<std::string>;
}  // namespace nansense::detail

namespace nansense::server {

class ProbeArea {
 public:
  explicit ProbeArea(detail::SessionPort& session);

  using Wait = std::chrono::milliseconds;
  // Pinned batch (and where), forward mode, perturbations (input by name),
  // runs completed, whether one is pending, the newest result (run, the
  // batch re-run, diff, layers) or its error, and a hint. While a probe is
  // active the snapshot every query and picture reads is the probe's result.
  ProbeStatus get_probe_status() const;
  // Each change returns get_probe_status() once the probe's next run
  // finished or `wait` passed (then "pending": true). Refusals: kConflict
  // while the loop runs or after it ended, with nothing captured, or (unpin)
  // with nothing pinned; kInvalidArgument for a perturbation that does not
  // fit the input, saying what does.
  ProbeStatus pin_batch(Wait wait);
  ProbeStatus unpin_batch(Wait wait);
  ProbeStatus set_probe_mode(const std::string& mode, Wait wait);
  // `input`: a model input's name (the first when nullopt).
  ProbeStatus add_perturbation(const std::vector<int64_t>& index, const std::vector<double>& values, int64_t sample,
                               const std::optional<std::string>& input, Wait wait);
  // Adds "cleared": how many.
  ProbeStatus clear_perturbations(Wait wait);

 private:
  // get_probe_status() once the run answering settings `generation`
  // finished (or `wait` passed).
  ProbeStatus probe_reply(uint64_t generation, Wait wait) const;
  // Whose probes the calling visitor's probe commands and status use: on a
  // locked session the visitor's own, else the session's one shared state.
  detail::ProbeOwner caller() const;
  // The caller's probe state; nullopt when it has none (a locked session's
  // visitor before its first change, or a call naming no visitor).
  std::optional<detail::ProbeView> caller_view() const;
  // Applies `change` to the caller's probes (made on first use on a locked
  // session) and returns their settings generation; what it did goes to
  // `changed`. Refused on a locked session without a visitor (VisitorScope).
  uint64_t change(const detail::ProbeChange& change, detail::ProbeChanged* changed = nullptr);

  detail::SessionPort& session_;
};

}  // namespace nansense::server
