// A refused request: what every controller call and argument check throws,
// and what every transport turns into its own error (an HTTP status with
// {"error", "argument"}, an MCP error result).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace nansense::server {

class ControllerError : public std::runtime_error {
 public:
  // kInvalidArgument: the request is wrong (HTTP 400); kNotFound: it names
  // something that does not exist (404); kConflict: the session's state
  // forbids it now (409).
  enum class Kind { kInvalidArgument, kNotFound, kConflict };

  // The message says what to do. `argument` names the argument a refusal is
  // about, when it is about one (clients can point at the field).
  ControllerError(Kind kind, const std::string& message, std::string argument = "")
      : std::runtime_error(message), kind_(kind), argument_(std::move(argument)) {}
  Kind kind() const { return kind_; }
  const std::string& argument() const { return argument_; }

 private:
  Kind kind_;
  std::string argument_;
};

// A picture asked of snapshot `shown` (the one the caller shows) that the
// latest snapshot, which replaced it, cannot give: a batch without gradients
// or with fewer samples. Not a refusal of the snapshot the caller asked
// about: REST answers 204 No Content, the push channel counts the snapshot as
// overtaken; elsewhere it is a conflict.
class SnapshotReplaced : public ControllerError {
 public:
  SnapshotReplaced(uint64_t shown, uint64_t latest, const std::string& reason)
      : ControllerError(Kind::kConflict,
                        "snapshot " + std::to_string(shown) + " was replaced by snapshot " + std::to_string(latest) +
                            ", which cannot give this picture (" + reason + "); ask again with sequence " +
                            std::to_string(latest),
                        "sequence") {}
};

}  // namespace nansense::server
