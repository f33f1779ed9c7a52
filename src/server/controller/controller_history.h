// The controller's statistics over time (controller_history.cpp): the
// settings (scope, watched layers, update cadence, per-channel detail), the
// published statistics view, the current batch binned the same way, logged
// series, and the histogram chart.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "render/render_cache.h"
#include "server/controller/json_views.h"
#include "server/controller/pictures.h"
#include "server/controller/replies.h"
#include "server/controller/replies_views.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

class Controller;

class StatsArea {
 public:
  StatsArea(Controller& owner, detail::SessionPort& session);

  // Settings = {update_frequency, stats_scope, watched_layers,
  // watch_performance, stats_collecting, auto_run_experiments,
  // experiment_defaults, experiment_time_limit_seconds}.
  Settings get_settings() const;
  // Each setter returns get_settings(); a refused value is kInvalidArgument
  // saying why, and nothing changes.
  Settings set_update_frequency(const std::string& unit, double n, const std::optional<std::string>& phase);
  Settings set_stats_scope(const std::string& scope);
  Settings watch_layers(const std::vector<std::string>& layers);
  Settings unwatch_layers(const std::vector<std::string>& layers);
  // Absent fields keep their value; the reply adds statistics_flushed.
  struct PerformanceChange {
    std::optional<bool> channel_limit_enabled;
    std::optional<int64_t> channel_limit;
    std::optional<int64_t> histogram_sample;
    std::optional<int64_t> samples_per_channel;
    std::optional<bool> average_patches;
  };
  Settings set_watch_performance(const PerformanceChange& change);
  // Min/Max patches for these layers (nullopt: the watched ones).
  Settings set_patch_layers(const std::optional<std::vector<std::string>>& layers);
  // What was collected: layers (graph order) with their phases and epochs,
  // parameters per layer, the scalar series, the bin edges.
  StatsList list_stats() const;
  // A layer's per-epoch statistics per phase (one phase when given) and its
  // parameters' samples. kNotFound naming the known layers or phases.
  StatsHistory get_stats_history(const std::string& layer, const std::optional<std::string>& phase) const;
  // The last captured batch's statistics of any layer, binned like the
  // collected ones (the Stats page's "current batch").
  CurrentStats get_current_stats(const std::string& layer) const;
  // Logged scalars and metric series (those of `layers` and every logged
  // scalar when layers are given) and the instruments that failed.
  Metrics get_metrics(const std::vector<std::string>& layers) const;
  struct HistogramOptions {
    std::vector<std::string> layers;
    std::optional<std::string> phase;
    bool log_x = false;
    bool log_y = false;
    std::optional<int64_t> channel;
  };
  // The newest epoch's histograms of each layer as a chart (PNG).
  std::shared_ptr<const HistogramPicture> render_histogram(const HistogramOptions& options) const;
  // The `stats` field of the status: settings and the view's sequence.
  StatsSummary summary() const;

 private:
  Controller& owner_;
  detail::SessionPort& session_;
  mutable render::RenderCache<HistogramPicture> histogram_cache_{32};
};

}  // namespace nansense::server
