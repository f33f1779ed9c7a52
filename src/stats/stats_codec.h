// A published statistics view (WatchSnapshot) in a state file, for frozen
// moments: the histograms, Min/Max patches, parameter samples and series
// exactly as the view held them, so a moment loaded later shows the numbers
// it was frozen with. Section "stats" is the view as JSON (non-finite numbers
// as "nan", "inf", "-inf"); "stats_tensors" a torch archive of the
// patches' crops and activation maps.
#pragma once

#include <memory>

#include "nansense/stats.h"
#include "state/state_file.h"

namespace nansense::stats {

// Adds the two sections to `file`. Throws state::StateError.
void write_stats(const WatchSnapshot& view, state::StateFile& file);

// The view `file` holds, its sequence as frozen. Throws state::StateError naming the
// file and what is malformed.
std::shared_ptr<const WatchSnapshot> read_stats(const state::StateFile& file);

}  // namespace nansense::stats
