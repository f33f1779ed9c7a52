// Every command and query of the controller, declared once: its name (the
// controller method's and the MCP tool's), what it does, its arguments, where
// REST serves it, the type of its reply and how it is carried out. The REST
// routes, the MCP tools with their input schemas, every argument check and
// the wire description the UI's types are checked against all come from this
// one table, so a command is added or changed in one place. The table is
// declared by area in commands_<area>.cpp (designated initializers, one
// field per line), beside the controller_<area>.cpp that carries it out.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/args.h"
#include "server/controller/controller.h"

namespace nansense::server {

// Where REST serves a command. GET reads the arguments from the query
// string, POST from a JSON body.
struct Route {
  std::string method;
  std::string path;
};

// What a command returns, for a transport to format.
struct Reply {
  json body;  // the JSON answer (REST's body, MCP's structuredContent)
  // Commands that wait for the next pause: where the loop was after the wait
  // and how long the wait could be (MCP says when a run is still going).
  std::optional<RunState> state;
  double waited_seconds = 0;
  // Pictures, instead of or beside the JSON.
  std::vector<std::shared_ptr<const StripPicture>> strips;
  std::shared_ptr<const InputPicture> input;
  std::shared_ptr<const HistogramPicture> histogram;
  std::shared_ptr<const ExperimentPicture> experiment;
  std::shared_ptr<const Picture> picture;
  // get_recording_file: a saved recording's bytes (REST only), inline to
  // play or, with `download`, as an attachment.
  std::shared_ptr<const RecordingArea::RecordedFile> file;
  bool download = false;
  // render_weights, render_weight_strip: parameter tensors drawn, and (for
  // render_weights) those that could not be, with body = {"parameters": per
  // parameter its shape, layout, scalar state and hyperparameters}.
  std::vector<std::shared_ptr<const WeightPicture>> weights;
  std::vector<WeightArea::WeightPictures::Missing> weights_missing;
  // render_layer: the strips that could not be drawn, and why.
  struct Missing {
    std::string layer;
    std::string kind;
    std::string reason;
  };
  std::vector<Missing> missing;
  // render_layer with include_input: why the input could not be drawn.
  std::string input_missing;
};

// What a locked session (Session::lock: a shared demo that many visitors
// browse) does with a command. kByReadOnly, the default: read-only commands
// run, the others are refused; kAllowed and kRefused say so explicitly (an
// experiment changes nothing another visitor sees; a read that exposes
// shared state being changed would be refused).
enum class WhenLocked { kByReadOnly, kAllowed, kRefused };

struct Command {
  std::string name;
  std::string title;        // a few words (MCP's title)
  std::string description;  // what an agent reads to choose and call it
  std::vector<Arg> args;
  std::optional<Route> rest;  // nullopt: not served over REST
  // Routes this command was served at before it was renamed to its one name
  // (docs/guide/differences.md, "One name per concept"). Each answers exactly
  // as `rest` does, through the next release (kOldRoutesUntil), and the HTTP
  // reference lists it under the route that replaced it.
  std::vector<Route> old_routes = {};
  bool mcp = true;        // false: not an MCP tool
  bool read_only = true;  // changes nothing in the run or its settings
  WhenLocked locked = WhenLocked::kByReadOnly;
  // The reply's type in wire_types() ("Status"); for pictures, the type of
  // the info that comes with the PNG; "" for MCP's own picture replies.
  std::string reply;
  std::function<Reply(Controller&, const Args&)> run;
};

// The release after which the old routes (Command::old_routes) stop answering.
inline constexpr const char* kOldRoutesUntil = kOldNamesUntil;

// Whether a locked session runs `command`.
bool runs_when_locked(const Command& command);

// The one dispatch every transport (REST, MCP) runs a command through: on a
// locked session, a command refused when locked is refused here (a conflict
// naming the lock) before it runs. `visitor`: who the call is made for (see
// VisitorScope): on a locked session its probe commands change that
// visitor's probes alone, and its queries read that visitor's view.
Reply dispatch(const Command& command, Controller& controller, const Args& args, const std::string& visitor = "");

// In the order MCP lists them.
const std::vector<Command>& commands();
// nullptr for an unknown name.
const Command* find_command(const std::string& name);
// The declared arguments of `name`, which must exist (the push channel checks
// its watch entries against render_strip's).
const std::vector<Arg>& args_of(const std::string& name);

}  // namespace nansense::server
