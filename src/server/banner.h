// The startup banner and the browser tab.
#pragma once

#include <string>

namespace nansense::server {

// Prints `url` in a box so it stands out in a training log, with the command
// that adds the MCP endpoint to an agent when `mcp_install` is not empty.
void print_banner(const std::string& url, const std::string& mcp_install = "");
// Opens `url` in the desktop's browser when there is a desktop; never blocks.
void open_browser(const std::string& url);

}  // namespace nansense::server
