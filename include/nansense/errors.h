// Errors nansense raises into the caller's thread.
#pragma once

#include <stdexcept>

namespace nansense {

// A batch that does not fit the declared schedule (unknown phase, one batch
// too many) or an invalid schedule declaration.
class ScheduleError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A run-control request that cannot be honoured: a target in the past, an
// unknown phase, a command on a finished run. The message says what to do.
class ControlError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Misuse of the session API (for example batches() after close()).
class UsageError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace nansense
