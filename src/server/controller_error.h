// A refused request: what every controller call and argument check throws,
// and what every transport turns into its own error (an HTTP status with
// {"error", "argument"}, an MCP error result).
#pragma once

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

}  // namespace nansense::server
