// The one way nansense puts a file on disk (checkpoints, capsules).
//
// Durability rule: when write_file_atomic() returns, `path` holds exactly the
// bytes given and keeps them through a crash or power loss: the bytes go to a
// temp file beside `path`, which is fsynced, renamed over `path`, and then the
// folder is fsynced so that the rename itself is on disk. Until it returns,
// and whenever it throws, `path` holds its previous content (or does not
// exist): never a part of the new one. A failure removes the temp file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>
#include <vector>

#include "state/state_error.h"

namespace nansense::state {

// Fault injection for tests: asked before each write with the bytes written
// so far and the chunk's size; returning true fails that write as a full disk
// would (ENOSPC).
using WriteFault = std::function<bool(uint64_t written, size_t chunk)>;

// Writes the concatenation of `parts` to `path` under the rule above. Throws
// StateError naming the file and the system's reason.
void write_file_atomic(const std::filesystem::path& path, const std::vector<std::string_view>& parts,
                       const WriteFault& fault = {});

}  // namespace nansense::state
