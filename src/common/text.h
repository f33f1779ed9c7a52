// Small text helpers every part's messages share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nansense::common {

// "a, b, c"; `none` when there are no names (a refusal's list of what exists
// says "(none)", a list inside a sentence says nothing).
inline std::string join(const std::vector<std::string>& names, std::string_view none = "") {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? std::string(none) : out;
}

}  // namespace nansense::common
