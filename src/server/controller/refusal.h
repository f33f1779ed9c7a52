// The server's refusals: common::Refusal (common/refusal.h), what every
// controller call and argument check throws, SnapshotReplaced and
// FixedByRecording.
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

// A change to what an active recording shows (recorder.h's FixedSetting): the
// statistics scope under a recording of histograms, a recorded layer
// unwatched, the update cadence under any recording. A conflict (HTTP 409, an
// MCP error) naming the recording's key and how to release it; `what` says
// what is fixed ("the statistics scope"), `why` what the change would do to
// the video.
class FixedByRecording : public Refusal {
 public:
  FixedByRecording(const std::string& command, const std::string& what, const std::string& key,
                   const std::string& label, const std::string& why, const std::string& argument = "")
      : Refusal(Kind::kConflict, command + " refused: " + message(what, key, label, why), argument) {}

  // What the status's `fixed` says of a fixed setting, and the refusal
  // after its command's name.
  static std::string message(const std::string& what, const std::string& key, const std::string& label,
                             const std::string& why) {
    return what + " is fixed while \"" + key + "\" records (" + label + "): " + why +
           ". Save & Finish (stop_recording key \"" + key + "\") or Delete (discard_recording) the recording first";
  }
};

}  // namespace nansense::server
