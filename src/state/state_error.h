// The one error the state layer throws.
#pragma once

#include <stdexcept>

namespace nansense::state {

// A training state or state file that cannot be written, read or used. The
// message names the file (or state) and what is wrong, as a person would fix
// it: a full disk, a truncated file, a checksum mismatch in a named section,
// an older nansense format, the first mismatch with the live model.
class StateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace nansense::state
