// Base64 (RFC 4648, with padding): images inside JSON (MCP image content,
// the Stats page's gallery cells).
#pragma once

#include <string>

namespace nansense::common {

std::string base64(const std::string& bytes);

}  // namespace nansense::common
