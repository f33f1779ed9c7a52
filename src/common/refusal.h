// A refused request: the one refusal type below the public API. The
// experiments engine, the probes, the controller and the command arguments'
// checks (server/controller/args.h) throw it; each transport turns it into
// its own error in one place (REST: status_for in
// server/http/api_routes.cpp, an HTTP status with {"error", "argument"}; MCP:
// an error result; Python: python/bindings.cpp's translator, ControlError for
// kConflict, else ArgumentError, a ValueError).
//
// Code that checks a value without knowing where it came from (render/, the
// experiments' parameter checks, common/json_read.h, the stats codec, the
// Python mirror) throws std::invalid_argument instead; the caller that knows
// turns it into its own error: a kInvalidArgument refusal, adding what the
// request named, where a request gave the value (the engine, the
// controller), CapsuleError or MomentError where a file did. Those parts then
// need no request vocabulary (Kind, argument) and serve where there is no
// request too (recordings; Python, where pybind11 makes it a ValueError).
#pragma once

#include <string>
#include <utility>

#include "nansense/errors.h"

namespace nansense::common {

class Refusal : public Error {
 public:
  // kInvalidArgument: the request is wrong (HTTP 400); kNotFound: it names
  // something that does not exist (404); kConflict: the session's state
  // forbids it now (409).
  enum class Kind { kInvalidArgument, kNotFound, kConflict };

  // The message says what to do. `argument` names the argument a refusal is
  // about, when it is about one (clients can point at the field).
  Refusal(Kind kind, const std::string& message, std::string argument = "")
      : Error(message), kind_(kind), argument_(std::move(argument)) {}
  Kind kind() const { return kind_; }
  const std::string& argument() const { return argument_; }

  // The same refusal naming `argument`, unless it names one already.
  Refusal about(const std::string& argument) const {
    return Refusal(kind_, what(), argument_.empty() ? argument : argument_);
  }

 private:
  Kind kind_;
  std::string argument_;
};

}  // namespace nansense::common
