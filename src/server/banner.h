// The startup banner and the browser tab.
#pragma once

#include <string>

namespace nansense::server {

// Prints `url` in a box so it stands out in a training log.
void print_banner(const std::string& url);
// Opens `url` in the desktop's browser when there is a desktop; never blocks.
void open_browser(const std::string& url);

}  // namespace nansense::server
