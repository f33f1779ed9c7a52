// Where recordings and snapshots go, and their names: one folder per run,
// nansense_recordings/<run timestamp>/ (the NANSENSE_RECORDINGS_DIR
// environment variable names another parent), and file names that sort in
// the order they were made and never overwrite one another.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

namespace nansense::record {

// "<parent>/<YYYYMMDD-HHMMSS>" for a run started at `started` (local time).
// The folder is created on first use, not here.
std::string run_folder(std::time_t started);

// `key` as a file name part: letters, digits, '.', '-' and '_' kept, the rest '_'
// ("weights:features.0" -> "weights_features.0").
std::string file_part(const std::string& key);

// `folder/stem.ext`, or `folder/stem-2.ext`, `-3`... when taken, created empty
// (so the name is the caller's). Creates the folder; throws std::runtime_error
// when it cannot.
std::string free_path(const std::string& folder, const std::string& stem, const std::string& ext);

// The snapshot stem of a view at a training position: "<view>_ep<E>_<phase>_b<B>"
// with zero-padded numbers so the names sort by position.
std::string snapshot_stem(const std::string& key, int64_t epoch, const std::string& phase, int64_t batch);

}  // namespace nansense::record
