// Errors nansense raises into the caller's thread. Every one derives from
// nansense::Error, so `catch (const nansense::Error&)` takes them all; the one
// exception is TimeTravelJump (time_travel.h), which is no error and is not a
// std::exception on purpose.
#pragma once

#include <stdexcept>
#include <string>

namespace nansense {

// The base of every error nansense throws. what() says what is wrong and,
// where it can, what to do.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A batch that does not fit the declared schedule (unknown phase, one batch
// too many) or an invalid schedule declaration.
class ScheduleError : public Error {
 public:
  using Error::Error;
};

// A run-control request that cannot be honoured: a target in the past, an
// unknown phase, a command on a finished run. The message says what to do.
class ControlError : public Error {
 public:
  using Error::Error;
};

// A bad value given to a public function (a debug setting out of range, an
// unknown check category, a batch with more inputs than the forward takes).
// The message names the value and what is accepted.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// Misuse of the session API (for example batches() after close()).
class UsageError : public Error {
 public:
  using Error::Error;
};

// A distributed run (StartOptions::distributed) cannot go on together: a
// rank was lost (it died, hangs, or left its loop), or the ranks disagree
// (nansense started on only some of them). Thrown from start() or at a batch
// boundary (the next batch's start, close()); the message names the rank.
class DistributedError : public Error {
 public:
  using Error::Error;
};

}  // namespace nansense
