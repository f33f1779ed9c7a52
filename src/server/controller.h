// The one command/query layer every UI and MCP action goes through. Named
// like the original's MCP tools; transports only parse and format.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "render/render_cache.h"
#include "render/strip.h"
#include "nansense/snapshot.h"
#include "server/json_views.h"

namespace nansense::detail {
class SessionCore;
}

namespace nansense::server {

// A refused request. The message says what to do; kind picks the status a
// transport reports (HTTP 400/404/409, an MCP error result).
class ControllerError : public std::runtime_error {
 public:
  enum class Kind { kInvalidArgument, kNotFound, kConflict };
  ControllerError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class Controller {
 public:
  explicit Controller(detail::SessionCore& core) : core_(core) {}

  // --- queries ---
  json get_status() const;
  json get_architecture() const;
  // Per-layer summary of the last captured batch.
  json get_snapshot() const;

  // Statistics of layers in the last captured batch (controller_stats.cpp):
  // per activation and gradient the shape, finite/NaN/Inf counts, min, max,
  // mean, population std, median, zero fraction and dead channels (dim 1
  // all zero over the batch); optionally a histogram of the finite values and
  // one channel's statistics. An empty `layers` means every layer.
  struct LayerStatsOptions {
    bool histogram = false;
    int64_t bins = 32;               // 2..512
    std::optional<int64_t> channel;  // an index along dim 1
  };
  json get_layer_stats(const std::vector<std::string>& layers, const LayerStatsOptions& options) const;
  // A layer's parameters in the last captured batch: value and gradient
  // statistics (with L2 norms), optimizer state and the param group's
  // hyperparameters, with a note where optimizer state is missing and why.
  // An empty `parameters` means all; names are qualified or short ("weight").
  json get_weight_stats(const std::string& layer, const std::vector<std::string>& parameters) const;

  // A layer's activation or gradient strip for one sample of the last captured
  // batch, as PNG, with what it shows (scale, layout, non-finite counts).
  struct RenderedImage {
    std::string png;
    json info;
  };
  std::shared_ptr<const RenderedImage> render_layer(const std::string& layer, const std::string& kind,
                                                    const render::StripOptions& options) const;
  // One sample of model input `input` (index into the snapshot's inputs) as
  // the image it was (input_mean/std, input_transform) or a colour strip.
  std::shared_ptr<const RenderedImage> render_input(int64_t input, int64_t sample) const;

  // The last published snapshot's sequence number; 0 before the first.
  uint64_t snapshot_sequence() const;

  // --- change feed for push transports ---
  // Sleeps until the run's state, mode or snapshot changes after `seen`, or
  // the timeout passes; returns the new change count.
  uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const;
  // Wakes every wait_for_change() (a transport shutting down).
  void wake_watchers();

  // --- commands: each returns get_status() once applied (or waited for) ---
  // `wait`: block until the loop pauses, finishes or is lost, at most this long.
  using Wait = std::optional<std::chrono::milliseconds>;
  json step(const std::string& unit, Wait wait = std::nullopt);
  json run(bool detach, Wait wait = std::nullopt);
  json pause(Wait wait = std::nullopt);
  json run_until(const std::string& phase, int64_t epoch, int64_t batch, Wait wait = std::nullopt);
  json refresh(Wait wait = std::nullopt);

  // --- time travel (controller_time_travel.cpp) ---
  // The Time Travel dialog's data: availability and reason, cached epochs,
  // the epoch count, the current and pending epochs, the cache folder with
  // its budget and use, per-checkpoint sizes, jumps done and the last problem.
  json get_time_travel_status() const;
  // Jumps to the start of a cached epoch, paused or running; waits like the
  // other commands for the pause on the target's first batch. Refused:
  // kConflict without a running epochs() loop (or on a finished/lost run),
  // kInvalidArgument for an epoch out of range, not cached, or whose
  // checkpoint is corrupted or belongs to another model.
  json time_travel(int64_t epoch, Wait wait = std::nullopt);

  // --- numerical debugging (controller_debug.cpp) ---
  // The checks' settings, the standing error (null when none: reasons,
  // position, per-layer fractions, band edges, root cause, capsule) and how
  // many batches were checked.
  json get_debug_report() const;
  // A partial update of the checks; absent fields keep their value. Returns
  // get_debug_report(). Bad values: kInvalidArgument naming the field.
  struct DebugChecksUpdate {
    std::optional<bool> enabled;
    std::optional<int64_t> interval_batches;
    std::optional<bool> check_nan_inf;
    std::optional<bool> check_under_over;
    std::optional<double> threshold_fraction;
    std::optional<int64_t> trace_interval_batches;
    std::optional<bool> rerun_to_trace;
    std::optional<std::vector<std::string>> allow;
  };
  json configure_debug_checks(const DebugChecksUpdate& update);
  // Turns a check category off ("nan_inf" or "under_over"; none = every
  // category of the standing error) and clears it from the standing error.
  json silence_debug_check(const std::optional<std::string>& category);
  // Dismisses the standing error, leaving the checks on.
  json clear_debug_error();
  // While the loop is paused before the optimizer step of a batch that
  // tripped: "skip" clears every parameter's gradient when the loop resumes
  // (its optimizer.step() then changes nothing), "apply" lets the update
  // through (the default). Conflict when no update is held.
  json choose_update(const std::string& action);

 private:
  template <class F>
  json command(F&& apply, Wait wait);
  // The `time_travel` field of get_status(): what the button needs.
  json time_travel_summary() const;
  // The `debug` field of get_status(): what a banner shows.
  json debug_summary() const;
  // The last published snapshot; kNotFound before the first capture.
  std::shared_ptr<const BatchSnapshot> require_snapshot() const;

  detail::SessionCore& core_;
  mutable std::mutex cache_mu_;
  mutable uint64_t cached_sequence_ = 0;
  mutable std::shared_ptr<const json> cached_snapshot_;
  mutable render::RenderCache<RenderedImage> render_cache_{256};
};

}  // namespace nansense::server
