// The derived numbers and sizes of the public statistics views
// (nansense/stats.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "nansense/stats.h"

namespace nansense {

namespace {

// Bytes a string holds beyond its object (short strings live inside it).
size_t heap(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }

template <typename T>
size_t heap(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// A std::map node: three pointers and a colour beside the value.
template <typename Value>
constexpr size_t kNode = sizeof(Value) + 4 * sizeof(void*);

size_t heap(const TensorStatsSnapshot& v) {
  size_t bytes = heap(v.hist) + heap(v.channel_hists) + heap(v.dead_channels);
  for (const auto& row : v.channel_hists) bytes += heap(row);
  return bytes;
}

}  // namespace

std::optional<double> TensorStatsSnapshot::mean() const {
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

std::optional<double> TensorStatsSnapshot::variance() const {
  if (n == 0) return std::nullopt;
  const double m = *mean();
  // E[x^2] - E[x]^2 can dip below zero by rounding when the spread is tiny.
  return std::max(0.0, sum_sq / static_cast<double>(n) - m * m);
}

std::optional<double> TensorStatsSnapshot::std() const {
  if (n == 0) return std::nullopt;
  return std::sqrt(*variance());
}

size_t StatsSnapshot::host_bytes() const {
  size_t bytes = sizeof(StatsSnapshot);
  for (const auto& [key, buckets] : layers) {
    bytes += kNode<std::pair<const std::pair<std::string, std::string>, std::vector<LayerStatsSnapshot>>>;
    bytes += heap(key.first) + heap(key.second) + heap(buckets);
    for (const auto& b : buckets) {
      bytes += heap(b.layer) + heap(b.phase);
      if (b.activation) bytes += heap(*b.activation);
      if (b.gradient) bytes += heap(*b.gradient);
    }
  }
  for (const auto& [name, samples] : parameters) {
    bytes += kNode<std::pair<const std::string, std::vector<ParameterSample>>> + heap(name) + heap(samples);
  }
  for (const auto& [name, layer] : owner) {
    bytes += kNode<std::pair<const std::string, std::string>> + heap(name) + heap(layer);
  }
  bytes += heap(series);
  for (const auto& s : series) bytes += heap(s.name) + heap(s.phase) + heap(s.layer) + heap(s.points);
  return bytes;
}

}  // namespace nansense
