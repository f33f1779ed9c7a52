#include "server/mcp/mcp_tools.h"

#include <cstdio>

#include "common/base64.h"
#include "render/downscale.h"
#include "server/controller/commands.h"
#include "server/mcp/jsonrpc.h"
#include "stats/bins.h"

namespace nansense::server::mcp {

const char* const kInstructions =
    "nansense debugs a LibTorch training loop while it runs. The loop pauses at its first batch and after every "
    "step. Start with get_status (state, where the loop is, the schedule, a hint), then get_architecture (the layer "
    "names every other tool takes). Inspect the last captured batch with get_layer_stats (NaN/Inf counts, ranges, "
    "mean/std, dead channels, histograms), get_weight_stats (a layer's parameters, gradients, optimizer state and "
    "learning rate), render_layer / render_input (PNG pictures of activations, gradients and inputs) and "
    "render_weights (a layer's weights, gradients and optimizer state as pictures, laid out by dimension roles). "
    "Move the "
    "run with step (batch, phase or epoch), run_until (a phase/epoch/batch position), run (to the end, or detached) "
    "and pause; each command waits for the next pause up to timeout_seconds and returns the status. Two positions "
    "matter: live_position is where the loop is now, snapshot_position is the batch every stats tool and picture "
    "describes; while the loop runs, refresh captures a newer batch without pausing. When a NaN, an Inf or a "
    "gradient under/overflow appears, the run pauses before the optimizer step and get_status's debug field says "
    "so: get_debug_report names the op that produced it and the layers affected; configure_debug_checks and "
    "silence_debug_check tune the checks. Statistics over time: watch_layers (or set_stats_scope all) collects "
    "per-epoch statistics of layers while the loop runs; list_stats, get_stats_history, get_metrics (logged "
    "scalars such as loss) and render_histogram read them; get_settings / set_update_frequency set how often a "
    "running loop is published. Numbers are rounded to 6 "
    "significant digits; non-finite values are the strings \"nan\", \"inf\", \"-inf\". A refusal (finished run, "
    "lost loop, unknown layer, bad argument) is a tool error whose message says what to do instead.";

namespace {

json text(const std::string& s) { return {{"type", "text"}, {"text", s}}; }

std::string dims(int64_t w, int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// One sentence an agent can read instead of decoding the picture's legend.
std::string describe(const StripPicture& p) {
  const auto& d = p.drawn;
  std::string s = p.layer + " " + p.kind + ", sample " + std::to_string(p.options.sample) + " of a batch of " +
                  std::to_string(d.batch_size) + " at " + p.position.to_string() +
                  (p.options.average ? " (channel average)" : "") + ": ";
  s += std::to_string(d.tiles) + " tile" + (d.tiles == 1 ? "" : "s") + " of " + dims(d.tile_width, d.tile_height) +
       " px (layout " + d.layout + ")" + (d.tiles > 1 ? " in one row with 1 px transparent gaps" : "") + "; ";
  const std::string scale_max = number(d.scale_max).dump();
  auto range = [&] {
    return d.value_min ? " (values " + std::to_string(*d.value_min) + " .. " + std::to_string(*d.value_max) + ", " +
                             std::to_string(d.distinct) + " distinct)"
                       : std::string();
  };
  if (d.scale == "boolean") {
    s += "a " + d.dtype + " tensor, one pixel per value: true dark blue, false light gray; " +
         std::to_string(d.true_count) + " true.";
    return s;
  }
  if (d.scale == "categorical") {
    s += "a " + d.dtype + " tensor (ids, labels or indices), one pixel per value, a colour per value (0 gray)" +
         range() + "; render_input writes an integer input's values out as numbers.";
    return s;
  }
  if (d.diverging) {
    s += "diverging scale -" + scale_max + " (blue) .. 0 (white) .. +" + scale_max + " (red)";
  } else {
    s += "sequential scale 0 .. " + scale_max + " of the " + std::string(render::to_string(p.options.values)) +
         " values";
  }
  s += "; NaN " + std::to_string(d.nan) + " (magenta/black checker), +Inf " + std::to_string(d.pos_inf) +
       " (yellow), -Inf " + std::to_string(d.neg_inf) + " (green).";
  return s;
}

std::string describe(const InputPicture& p) {
  std::string caption =
      "input " + std::to_string(p.input) + " (\"" + p.name + "\"), sample " + std::to_string(p.sample) +
      " of a batch of " + std::to_string(p.batch_size) + " at " + p.position.to_string() + ": " +
      (p.layout == "image" ? "the input as an image (denormalised with input_mean/input_std where set)."
       : p.layout == "values"
           ? "a " + p.dtype + " input as a grid of cells, each value written in its cell (" +
                 (p.dtype == "bool" ? "1 = true on dark blue, 0 = false on light gray" : "a colour per value, 0 gray") +
                 "; a vector wraps at 16 cells a row)."
           : "a colour strip of its values (it does not look like an image).");
  if (!p.hint.empty()) caption += " " + p.hint;
  return caption;
}

std::string describe(const HistogramPicture& p) {
  std::string caption = "Histograms over the " + stats::bins_description() +
                        " (end bins hold everything beyond +-1e6, +-Inf marked clipped), x axis " +
                        std::string(p.log_x ? "symmetric log" : "linear") + ", y axis " + (p.log_y ? "log" : "linear") +
                        " counts. Series:";
  for (const auto& s : p.series) caption += " " + s + ";";
  if (p.series.empty()) caption += " none (nothing collected for what was asked);";
  return caption;
}

std::string describe(const WeightPicture& p) {
  const auto& d = p.drawn;
  std::string shape;
  for (int64_t n : p.shape) shape += (shape.empty() ? "" : ",") + std::to_string(n);
  const std::string scale_max = number(d.scale_max).dump();
  return p.parameter + " " + p.tensor + " [" + shape + "] at " + p.position.to_string() + ", layout " +
         render::describe(p.layout) + ": " + std::to_string(d.tiles) + " tile" + (d.tiles == 1 ? "" : "s") + " of " +
         dims(d.tile_width, d.tile_height) + " px" + (d.tiles > 1 ? " in one row with 1 px transparent gaps" : "") +
         "; diverging scale -" + scale_max + " (blue) .. 0 (white) .. +" + scale_max + " (red); NaN " +
         std::to_string(d.nan) + ", +Inf " + std::to_string(d.pos_inf) + ", -Inf " + std::to_string(d.neg_inf) + ".";
}

// A parameter's scalar optimizer state and hyperparameters in one line.
std::string scalars_line(const json& parameter) {
  std::string line = parameter.at("name").get<std::string>() + ":";
  const auto add = [&](const json& values) {
    for (const auto& [key, v] : values.items()) {
      // "step=2", "lr=0.001": 6 significant digits, no trailing ".0".
      char value[32];
      if (v.is_number()) std::snprintf(value, sizeof value, "%.6g", v.get<double>());
      line += " " + key + "=" + (v.is_string() ? v.get<std::string>() : v.is_number() ? std::string(value) : v.dump());
    }
  };
  // The learning rate first: what an agent reads the line for.
  json hyper = parameter.at("hyperparameters");
  json lr_first = json::object();
  if (hyper.contains("lr")) {
    lr_first["lr"] = hyper["lr"];
    hyper.erase("lr");
  }
  add(lr_first);
  add(parameter.at("scalars"));
  add(hyper);
  if (parameter.at("scalars").empty() && parameter.at("hyperparameters").empty()) {
    line += " no optimizer state or hyperparameters (no optimizer holds it, or none was given to start())";
  }
  return line;
}

// Appends a PNG as image content with its caption; returns the caption's
// facts about size for structuredContent.
json append_image(ToolResult& r, const std::string& png, const std::string& caption) {
  auto fitted = render::fit_png(png);
  std::string size = " Image " + dims(fitted.width, fitted.height) + " px";
  if (fitted.downscaled()) {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%.3g", static_cast<double>(fitted.width) / fitted.original_width);
    size += ", downscaled from " + dims(fitted.original_width, fitted.original_height) + " px (factor " + factor +
            ") to fit " + std::to_string(render::kAgentMaxSide) +
            " px on the long side: neighbouring pixels are averaged, so single values may blur.";
  } else if (fitted.enlarged()) {
    size += ", enlarged " + std::to_string(fitted.width / fitted.original_width) + "x from " +
            dims(fitted.original_width, fitted.original_height) + " px (each rendered pixel is a square block).";
  } else {
    size += ".";
  }
  r.content.push_back(text(caption + size));
  r.content.push_back({{"type", "image"}, {"data", common::base64(fitted.png)}, {"mimeType", "image/png"}});
  return {{"sent_width", fitted.width},
          {"sent_height", fitted.height},
          {"downscaled", fitted.downscaled()},
          {"enlarged", fitted.enlarged()}};
}

// A command's reply as MCP content: JSON as text (and structuredContent),
// pictures as image content with their captions, and a note when a command
// waited and the loop is still running.
ToolResult tool_result(Reply reply) {
  ToolResult r;
  if (!reply.strips.empty() || reply.input) {
    // The input first: render_input's picture, or render_layer's include_input above the strips.
    json input;
    if (reply.input) {
      input = info_json(*reply.input);
      input.update(append_image(r, reply.input->png, describe(*reply.input)));
    }
    if (reply.strips.empty()) {
      r.structured = std::move(input);
      return r;
    }
    json images = json::array();
    for (const auto& strip : reply.strips) {
      json info = info_json(*strip);
      info.update(append_image(r, strip->png, describe(*strip)));
      images.push_back(std::move(info));
    }
    json missing = json::array();
    for (const auto& m : reply.missing) {
      r.content.push_back(text("no " + m.kind + " image for " + m.layer + ": " + m.reason));
      missing.push_back({{"layer", m.layer}, {"kind", m.kind}, {"reason", m.reason}});
    }
    r.structured = {{"images", std::move(images)}, {"missing", std::move(missing)}};
    if (reply.input) r.structured["input"] = std::move(input);
    if (!reply.input_missing.empty()) {
      r.content.push_back(text("no input image: " + reply.input_missing));
      r.structured["input_missing"] = reply.input_missing;
    }
    return r;
  }
  if (!reply.weights.empty() || !reply.weights_missing.empty()) {
    json images = json::array();
    for (const auto& picture : reply.weights) {
      json info = info_json(*picture);
      info.update(append_image(r, picture->png, describe(*picture)));
      images.push_back(std::move(info));
    }
    json missing = json::array();
    for (const auto& m : reply.weights_missing) {
      r.content.push_back(text("no " + m.tensor + " image for " + m.parameter + ": " + m.reason));
      missing.push_back({{"parameter", m.parameter}, {"tensor", m.tensor}, {"reason", m.reason}});
    }
    json parameters = reply.body.value("parameters", json::array());
    for (const auto& p : parameters) r.content.push_back(text(scalars_line(p)));
    r.structured = {{"images", std::move(images)}, {"missing", std::move(missing)}, {"parameters", parameters}};
    return r;
  }
  if (reply.experiment) {
    json info = info_json(*reply.experiment);
    info.update(append_image(r, reply.experiment->png, reply.experiment->caption));
    r.structured = std::move(info);
    return r;
  }
  if (reply.picture) {
    json info = reply.picture->info;
    info.update(append_image(r, reply.picture->png, reply.picture->caption));
    r.structured = std::move(info);
    return r;
  }
  if (reply.histogram) {
    json info = info_json(*reply.histogram);
    info.update(append_image(r, reply.histogram->png, describe(*reply.histogram)));
    r.structured = std::move(info);
    return r;
  }
  r.content.push_back(text(dump(reply.body)));
  r.structured = std::move(reply.body);
  if (reply.state == RunState::kRunning) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", reply.waited_seconds);
    r.content.push_back(text(std::string("still running after ") + seconds +
                             " s: call get_status to follow it, or pause to stop at the next batch"));
  }
  return r;
}

}  // namespace

Tools::Tools(Controller& controller) : controller_(controller) {}

json Tools::list(const std::string& version) const {
  json tools = json::array();
  for (const auto& command : commands()) {
    if (!command.mcp) continue;
    json entry = {
        {"name", command.name}, {"description", command.description}, {"inputSchema", input_schema(command.args)}};
    if (version >= "2025-06-18") entry["title"] = command.title;
    if (version >= "2025-03-26") {
      entry["annotations"] = {{"title", command.title},
                              {"readOnlyHint", command.read_only},
                              {"destructiveHint", false},
                              {"idempotentHint", command.read_only},
                              {"openWorldHint", false}};
    }
    tools.push_back(std::move(entry));
  }
  return {{"tools", std::move(tools)}};
}

json Tools::call(const std::string& name, const json& arguments, const std::string& version,
                 const std::string& visitor) const {
  const Command* command = find_command(name);
  if (!command || !command->mcp) {
    std::string known;
    for (const auto& c : commands()) {
      if (c.mcp) known += (known.empty() ? "" : ", ") + c.name;
    }
    throw RpcError(kInvalidParams, "unknown tool \"" + name + "\"; tools: " + known);
  }
  ToolResult r;
  try {
    r = tool_result(dispatch(*command, controller_, Args(command->args, arguments), visitor));
  } catch (const Refusal& e) {
    r = ToolResult{};
    r.is_error = true;
    r.content.push_back(text(e.what()));
    r.structured = {{"error", e.what()},
                    {"state", std::string(to_string(controller_.run_control().get_status().state))}};
    if (!e.argument().empty()) r.structured["argument"] = e.argument();
  } catch (const std::exception& e) {
    r = ToolResult{};
    r.is_error = true;
    r.content.push_back(text(std::string("internal error in nansense: ") + e.what()));
  }
  json out = {{"content", std::move(r.content)}, {"isError", r.is_error}};
  if (version >= "2025-06-18" && r.structured.is_object()) out["structuredContent"] = std::move(r.structured);
  return out;
}

}  // namespace nansense::server::mcp
