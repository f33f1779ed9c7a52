#include "server/banner.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace nansense::server {

namespace {

// Terminal columns of UTF-8 text (every code point one column).
size_t columns(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

void print_banner(const std::string& url, const std::string& mcp_install) {
  std::vector<std::string> lines = {"nansense is serving the training debugger at", url};
  if (!mcp_install.empty()) {
    lines.insert(lines.end(), {"", "Coding agents (MCP) — add the endpoint to Claude Code:", mcp_install,
                               "Any other MCP client: the same URL, Streamable HTTP transport."});
  }
  size_t width = 0;
  for (const auto& l : lines) width = std::max(width, columns(l));
  std::ostringstream os;
  std::string bar;
  for (size_t i = 0; i < width + 2; ++i) bar += "─";
  os << "╭" << bar << "╮\n";
  for (const auto& l : lines) os << "│ " << l << std::string(width - columns(l), ' ') << " │\n";
  os << "╰" << bar << "╯\n";
  std::cout << os.str() << std::flush;
}

void open_browser(const std::string& url) {
  const char* display = std::getenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  if ((!display || !*display) && (!wayland || !*wayland)) return;  // headless: nothing to open
  const char* path = std::getenv("PATH");
  std::string opener;
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    auto candidate = std::filesystem::path(dir) / "xdg-open";
    if (access(candidate.c_str(), X_OK) == 0) {
      opener = candidate.string();
      break;
    }
  }
  if (opener.empty()) return;
  std::vector<char*> argv = {const_cast<char*>(opener.c_str()), const_cast<char*>(url.c_str()), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, opener.c_str(), nullptr, nullptr, argv.data(), environ) == 0) {
    // Reap it in the background so no zombie is left behind.
    std::thread([pid] { waitpid(pid, nullptr, 0); }).detach();
  }
}

}  // namespace nansense::server
