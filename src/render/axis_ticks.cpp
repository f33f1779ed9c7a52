#include "render/axis_ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace nansense::render {

namespace {

std::string printf_string(const char* format, int precision, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, precision, v);
  return buf;
}

std::string strip_zeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

double nice_step(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

std::string format_tick(double v, double step) {
  if (std::abs(v) < step * 1e-6) return "0";
  const double a = std::abs(v);
  const int step_exponent = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  if (a >= 1e-3 && a < 1e5) return printf_string("%.*f", std::clamp(-step_exponent, 0, 6), v);
  int exponent = static_cast<int>(std::floor(std::log10(a)));
  const int digits = std::clamp(exponent - step_exponent, 0, 3);
  std::string mantissa = printf_string("%.*f", digits, v / std::pow(10.0, exponent));
  if (std::abs(std::atof(mantissa.c_str())) >= 10) {  // 9.99 rounded up to 10.0
    ++exponent;
    mantissa = printf_string("%.*f", digits, v / std::pow(10.0, exponent));
  }
  return strip_zeros(mantissa) + "e" + std::to_string(exponent);
}

std::string format_count(double c) {
  if (c < 1e4) return std::to_string(std::llround(c));
  static constexpr std::string_view kUnits = "kMGTP";
  size_t unit = 0;
  c /= 1e3;
  while (c >= 1e3 && unit + 1 < kUnits.size()) {
    c /= 1e3;
    ++unit;
  }
  return printf_string("%.*g", 3, c) + kUnits[unit];
}

std::vector<Tick> without_overlaps(const std::vector<Tick>& ticks, const std::function<int(const Tick&)>& extent,
                                   int gap) {
  std::vector<Tick> kept;
  std::vector<std::pair<double, double>> taken;
  for (const auto& tick : ticks) {
    const double half = extent(tick) / 2.0 + gap / 2.0;
    const double lo = tick.pos - half, hi = tick.pos + half;
    const bool clear =
        std::none_of(taken.begin(), taken.end(), [&](const auto& t) { return lo < t.second && t.first < hi; });
    if (clear) {
      taken.emplace_back(lo, hi);
      kept.push_back(tick);
    }
  }
  return kept;
}

}  // namespace nansense::render
