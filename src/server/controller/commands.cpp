#include "server/controller/commands.h"

#include <stdexcept>

#include "server/controller/command_parts.h"

namespace nansense::server {

namespace {

std::vector<Command> table() {
  using namespace command_parts;
  std::vector<Command> t;
  for (auto area : {run_commands, run_control_commands, debug_commands, time_travel_commands, picture_commands,
                    stats_commands, patch_commands, experiment_commands, probe_commands, recording_commands}) {
    for (auto& c : area()) t.push_back(std::move(c));
  }
  return t;
}

}  // namespace

bool runs_when_locked(const Command& command) {
  switch (command.locked) {
    case WhenLocked::kAllowed:
      return true;
    case WhenLocked::kRefused:
      return false;
    case WhenLocked::kByReadOnly:
      return command.read_only;
  }
  return false;
}

Reply dispatch(const Command& command, Controller& controller, const Args& args, const std::string& visitor) {
  if (!runs_when_locked(command) && controller.locked()) {
    throw Refusal(Refusal::Kind::kConflict,
                  "this session is locked (a shared demo): " + command.name +
                      " is refused; the layers, statistics, weights, experiments and your own probes stay available");
  }
  VisitorScope scope(visitor);
  return command.run(controller, args);
}

const std::vector<Command>& commands() {
  static const std::vector<Command> table_ = table();
  return table_;
}

const Command* find_command(const std::string& name) {
  for (const auto& c : commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const std::vector<Arg>& args_of(const std::string& name) {
  const Command* c = find_command(name);
  if (!c) throw std::logic_error("no command \"" + name + "\"");
  return c->args;
}

}  // namespace nansense::server
