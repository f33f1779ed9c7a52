// What the command tables of commands_*.cpp share: the arguments several
// commands take, declared once, and the helpers that turn a controller's
// answer into a Reply. Internal to src/server/commands*.cpp.
#pragma once

#include "server/controller/commands.h"

namespace nansense::server::command_parts {

// --- arguments several commands share, declared once ---

// The longest a command waits for the loop to pause; the wait never holds up
// training, so the bound only limits how long a request stays open.
inline const Arg kTimeout =
    number_arg("timeout_seconds",
               "How long to wait for the loop to pause again before returning, in seconds (0 returns at once). "
               "The wait never holds up training; on timeout the status says \"running\" and the command stays "
               "in effect.")
        .at_least(0)
        .at_most(300)
        .or_else(30);

inline const Arg kLayer = string_arg("layer", "A layer name from get_architecture, e.g. \"features.0\".").not_empty();
inline const Arg kLayers =
    strings_arg("layers", "Layer names from get_architecture (e.g. \"features.0\", \"relu_1\", \"input\").")
        .not_empty()
        .items(1, 64);
inline const Arg kKind =
    string_arg("kind",
               "Which picture: the activation the layer produced, or the gradient that flowed back "
               "into it.")
        .one_of({"activation", "gradient"})
        .or_else("activation");
inline const Arg kSample = integer_arg("sample",
                                       "Index of the sample within the batch; one the snapshot budget left out "
                                       "(past get_snapshot's samples_kept) is refused.")
                               .at_least(0)
                               .or_else(0);
inline const Arg kAverage = boolean_arg("average", "Average the channels into one tile.").or_else(false);
inline const Arg kValues = string_arg("values",
                                      "Show the values as they are, or their magnitude (abs) or square, applied before "
                                      "averaging.")
                               .one_of({"unchanged", "abs", "square"})
                               .or_else("unchanged");
// The snapshot a page shows, so that a picture the newer snapshot that
// replaced it cannot give is no refusal of the page's own.
inline const Arg kShown =
    integer_arg("sequence",
                "The snapshot the caller shows (get_status's snapshot_sequence). The picture is "
                "drawn from the latest snapshot; when that is another one and cannot give it (an eval "
                "batch has no gradient, a phase's last batch fewer samples), the reply says the "
                "snapshot was replaced instead of refusing (REST: 204 No Content; MCP: a conflict naming the latest "
                "sequence).")
        .at_least(0);

// How a parameter's tensor is laid out (render/weight_strip.h): each
// dimension is X, Y, Tile or Index.
inline const Arg kXDim =
    integer_arg("x_dim",
                "The dimension drawn across each tile (X); -1 for none. Omit for the default (the "
                "last dimension). A dimension given a role leaves its old one; the role's old holder "
                "becomes an Index.")
        .at_least(-1);
inline const Arg kYDim = integer_arg("y_dim",
                                     "The dimension drawn down each tile (Y); -1 for none. Omit for the default (a "
                                     "matrix's rows, a conv kernel's height).")
                             .at_least(-1);
inline const Arg kTileDim =
    integer_arg("tile_dim",
                "The dimension whose indices become tiles in a row (Tile); -1 for none. Omit for "
                "the default (a conv weight's input channels).")
        .at_least(-1);
inline const Arg kIndex =
    integers_arg("index",
                 "Where each Index dimension (one not given X, Y or Tile) is held, one entry per "
                 "dimension in order (entries of X/Y/Tile dimensions are ignored; missing ones are "
                 "0), e.g. [3] shows a conv weight's output channel 3.")
        .at_least(0)
        .items(0, 16);

inline render::WeightLayoutRequest layout_of(const Args& a) {
  render::WeightLayoutRequest r;
  r.x_dim = a.optional_integer("x_dim");
  r.y_dim = a.optional_integer("y_dim");
  r.tile_dim = a.optional_integer("tile_dim");
  r.index = a.integers("index");
  return r;
}

inline std::optional<uint64_t> shown_of(const Args& a) {
  const auto shown = a.optional_integer("sequence");
  return shown ? std::optional<uint64_t>(static_cast<uint64_t>(*shown)) : std::nullopt;
}

// --- replies ---

inline Reply json_reply(json body) {
  Reply r;
  r.body = std::move(body);
  return r;
}

// A typed reply (reply.h) as its JSON.
template <class T, std::enable_if_t<is_reply<T>::value, int> = 0>
Reply json_reply(const T& reply) {
  return json_reply(to_json(reply));
}

// A command's status, with where the loop was after waiting up to timeout_seconds.
inline Reply status_reply(const Status& status, const Args& args) {
  Reply r = json_reply(to_json(status));
  r.state = status.state;
  r.waited_seconds = args.number("timeout_seconds");
  return r;
}

inline Controller::Wait wait_of(const Args& args) {
  return Controller::Wait(static_cast<int64_t>(args.number("timeout_seconds") * 1000));
}

inline render::StripOptions strip_options(const Args& a) {
  render::StripOptions options;
  options.sample = a.integer("sample");
  options.average = a.boolean("average");
  options.values = render::parse_values(a.string("values"));
  return options;
}

// Every strip of every layer asked for; a strip that cannot be drawn is
// named with its reason, and only no strip at all is a refusal.
inline Reply render_layer(Controller& c, const Args& a) {
  const auto options = strip_options(a);
  const std::string kind = a.string("kind");
  std::vector<std::string> kinds;
  if (kind != "gradient") kinds.push_back("activation");
  if (kind != "activation") kinds.push_back("gradient");
  Reply r;
  std::string reasons;
  for (const auto& layer : a.strings("layers")) {
    for (const auto& k : kinds) {
      try {
        r.strips.push_back(c.views().render_strip(layer, k, options));
      } catch (const Refusal& e) {
        r.missing.push_back({layer, k, e.what()});
        reasons += (reasons.empty() ? "" : "; ") + std::string(e.what());
      }
    }
  }
  if (r.strips.empty()) throw Refusal(Refusal::Kind::kInvalidArgument, "no image rendered: " + reasons);
  // include_input, as in the original NaNsense 0.4.0 (Python, on PyPI): the
  // first model input's sample above the strips.
  if (a.boolean("include_input")) {
    try {
      r.input = c.views().render_input(0, options.sample);
    } catch (const Refusal& e) {
      r.input_missing = e.what();
    }
  }
  return r;
}

// The index of the model input named `name` (get_architecture's inputs),
// refused naming the inputs there are; `argument` is the caller's name for it.
inline int64_t input_index(Controller& c, const std::string& name, const std::string& argument) {
  const std::vector<std::string> inputs = c.views().get_architecture().inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == name) return static_cast<int64_t>(i);
  }
  throw Refusal(Refusal::Kind::kInvalidArgument,
                "no model input named \"" + name + "\"; the inputs are " +
                    (inputs.empty() ? std::string("none yet (no batch captured)") : json(inputs).dump()),
                argument);
}

// Each area's commands, in the order MCP lists them.
std::vector<Command> run_commands();  // where the run is: status, architecture, snapshot, layer statistics
std::vector<Command> run_control_commands();
std::vector<Command> debug_commands();
std::vector<Command> time_travel_commands();
std::vector<Command> picture_commands();
std::vector<Command> stats_commands();
std::vector<Command> patch_commands();
std::vector<Command> experiment_commands();
std::vector<Command> probe_commands();
std::vector<Command> recording_commands();

}  // namespace nansense::server::command_parts
