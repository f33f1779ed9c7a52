// Finding things in a published statistics view, and naming what there is in
// a refusal (controller_history.cpp, controller_patches.cpp).
#pragma once

#include <string>
#include <vector>

#include "nansense/architecture.h"
#include "nansense/schedule.h"
#include "nansense/stats.h"

namespace nansense::server {

// "a, b, c", or "(none)".
std::string join(const std::vector<std::string>& names);

// The phases a layer has statistics for, in the schedule's order (others
// after, by name).
std::vector<std::string> phases_of(const WatchSnapshot& s, const std::string& layer, const Schedule& schedule);

// Layers with statistics, in the architecture's order (others after).
std::vector<std::string> layers_of(const WatchSnapshot& s, const Architecture* architecture);

}  // namespace nansense::server
