// The server's refusals: common::Refusal (common/refusal.h), what every
// controller call and argument check throws, and SnapshotReplaced.
#pragma once

#include <cstdint>
#include <string>

#include "common/refusal.h"

namespace nansense::server {

using common::Refusal;

// A picture asked of snapshot `shown` (the one the caller shows) that the
// latest snapshot, which replaced it, cannot give: a batch without gradients
// or with fewer samples. Not a refusal of the snapshot the caller asked
// about: REST answers 204 No Content, the push channel counts the snapshot as
// overtaken; elsewhere it is a conflict.
class SnapshotReplaced : public Refusal {
 public:
  SnapshotReplaced(uint64_t shown, uint64_t latest, const std::string& reason)
      : Refusal(Kind::kConflict,
                "snapshot " + std::to_string(shown) + " was replaced by snapshot " + std::to_string(latest) +
                    ", which cannot give this picture (" + reason + "); ask again with sequence " +
                    std::to_string(latest),
                "sequence") {}
};

}  // namespace nansense::server
