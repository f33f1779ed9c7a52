// JSON views of the engine's values that only the transports show (the
// conventions every part shares are in common/json_values.h).
#pragma once

#include "common/json_values.h"
#include "nansense/architecture.h"
#include "nansense/snapshot.h"
#include "server/controller/replies_views.h"

namespace nansense::server {

using common::json;
using common::number;
using common::to_json;

// get_architecture's reply for a traced graph (captured, with its edges).
ArchitectureView architecture_view(const Architecture& arch);

// "1.5 MiB", "512 MiB".
std::string mib(int64_t bytes);
// What the snapshot budget left out of `snap` (get_snapshot's "budget").
SnapshotBudget budget_of(const BatchSnapshot& snap);
// A reply's "samples" where the budget trimmed `snap`: kept, of, and a note
// saying what `covers` the kept samples.
SamplesKept samples_kept(const BatchSnapshot& snap, const std::string& covers);

}  // namespace nansense::server
