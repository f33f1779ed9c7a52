// Numbers on chart axes: tick spacing, tick labels, and labels kept apart.
// Shared by the server-drawn charts.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace nansense::render {

// 1, 2 or 5 times a power of ten, at least `raw` (> 0): the spacing of ticks
// people can read off.
double nice_step(double raw);

// A tick value of a linear axis whose ticks are `step` apart: as many decimals
// as the step needs ("0.25", "-3"), scientific past 1e5 or below 1e-3
// ("2e5", "1.5e-4"); "0" for zero.
std::string format_tick(double value, double step);

// Counts as people read them: "950", "9500", "12k", "1.5M", "3G".
std::string format_count(double count);

struct Tick {
  double pos;  // pixel along the axis
  std::string label;
};

// The ticks whose labels, extent(tick) pixels long and centred on their
// position, keep `gap` pixels from every label kept before them: earlier
// ticks win, so put the ones that matter most first.
std::vector<Tick> without_overlaps(const std::vector<Tick>& ticks, const std::function<int(const Tick&)>& extent,
                                   int gap);

}  // namespace nansense::render
