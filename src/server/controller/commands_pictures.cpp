// The commands that picture strips, weights and inputs (controller.cpp,
// controller_weights.cpp), declared once (commands.h says what a
// declaration holds).
#include "server/controller/command_parts.h"

namespace nansense::server::command_parts {

std::vector<Command> picture_commands() {
  std::vector<Command> t;
  t.push_back({
      .name = "render_strip",
      .title = "Picture one strip",
      .description = "A PNG of one sample's activation or gradient of one layer in the last captured batch (the UI's "
                     "strips), with what it shows as JSON beside it.",
      .args = {kLayer.mandatory(), kKind, kSample, kAverage, kValues, kShown},
      .rest = Route{"GET", "/api/render/strip"},
      .mcp = false,
      .read_only = true,
      .reply = "StripInfo",
      .run =
          [](Controller& c, const Args& a) {
            Reply r;
            r.strips.push_back(
                c.views().render_strip(a.string("layer"), a.string("kind"), strip_options(a), shown_of(a)));
            return r;
          },
  });
  t.push_back({
      .name = "render_instrument_strip",
      .title = "Picture one layer-tensor instrument's output",
      .description =
          "A PNG of one sample of a watch_layer_tensor instrument's output for a layer in the last captured "
          "batch (the extra strips under a card), drawn like render_strip, with what it shows as JSON beside "
          "it (kind \"instrument:<name>\").",
      .args = {kLayer.mandatory(),
               string_arg("instrument", "The instrument's name, as registered with watch_layer_tensor.")
                   .not_empty()
                   .mandatory(),
               kSample, kAverage, kValues, kShown},
      .rest = Route{"GET", "/api/render/instrument_strip"},
      .mcp = false,
      .read_only = true,
      .reply = "InstrumentStripInfo",
      .run =
          [](Controller& c, const Args& a) {
            Reply r;
            r.strips.push_back(c.views().render_strip(a.string("layer"), "instrument:" + a.string("instrument"),
                                                      strip_options(a), shown_of(a)));
            return r;
          },
  });
  t.push_back({
      .name = "render_weight_strip",
      .title = "Picture one tensor of a parameter",
      .description =
          "A PNG of one tensor of a layer's parameter in the last captured batch (the Weights page's strips): "
          "the weight, its gradient, a tensor-valued optimizer state entry or a weight-tensor instrument's "
          "output, laid out by dimension roles, with what it shows as JSON beside it.",
      .args =
          {kLayer.described("A layer name from get_architecture that has parameters, e.g. \"features.0\".").mandatory(),
           string_arg("parameter", "The parameter, qualified (\"features.0.weight\") or short (\"weight\").")
               .not_empty()
               .mandatory(),
           string_arg("tensor",
                      "Which tensor: \"weight\", \"gradient\", \"state:<key>\" (an optimizer state entry, "
                      "e.g. \"state:exp_avg\") or \"instrument:<name>\" (a watch_weight_tensor instrument).")
               .not_empty()
               .or_else("weight"),
           kXDim, kYDim, kTileDim, kIndex, kShown},
      .rest = Route{"GET", "/api/render/weight_strip"},
      .mcp = false,
      .read_only = true,
      .reply = "WeightStripInfo",
      .run =
          [](Controller& c, const Args& a) {
            Reply r;
            r.weights.push_back(c.weights().render_weight(a.string("layer"), a.string("parameter"), a.string("tensor"),
                                                          layout_of(a), shown_of(a)));
            return r;
          },
  });
  t.push_back({
      .name = "render_weights",
      .title = "Picture a layer's weights, gradients and optimizer state",
      .description =
          "PNG pictures of each parameter of a layer in the last captured batch (read after the optimizer step): the "
          "weight, its gradient, every tensor-valued optimizer state entry (SGD's momentum_buffer, Adam's exp_avg and "
          "exp_avg_sq, ...) and each weight-tensor instrument's output, one strip each on a diverging scale centred "
          "on zero (blue negative, red positive; NaN a magenta/black checker, +Inf yellow, -Inf green). Each "
          "dimension takes a role: X (across a tile), Y (down a tile), Tile (one tile per index, in a row) or Index "
          "(held at one index). Defaults: a conv weight [O,I,kH,kW] shows output channel index[0]'s kernels as tiles "
          "across the input channels; a matrix one image; a vector one row. x_dim/y_dim/tile_dim/index apply to the "
          "tensors shaped like their parameter; the others keep their defaults. The text adds per parameter the "
          "scalar optimizer state (Adam's step) and the param group's live hyperparameters (lr, momentum, ...).",
      .args =
          {kLayer.described("A layer name from get_architecture that has parameters, e.g. \"features.0\".").mandatory(),
           strings_arg("parameters",
                       "Only these parameters, qualified (\"features.0.weight\") or short (\"weight\", \"bias\"); omit "
                       "for all.")
               .not_empty()
               .items(1, 64),
           kXDim, kYDim, kTileDim,
           kIndex.or_single().described(kIndex.description +
                                        " One integer alone is the first entry (NaNsense 0.4.0's index=0: a conv "
                                        "weight's output channel).")},
      .rest = std::nullopt,
      .mcp = true,
      .read_only = true,
      .reply = "",
      .run =
          [](Controller& c, const Args& a) {
            auto drawn = c.weights().render_weights(a.string("layer"), a.strings("parameters"), layout_of(a));
            Reply r;
            r.weights = std::move(drawn.pictures);
            r.weights_missing = std::move(drawn.missing);
            r.body = {{"parameters", std::move(drawn.parameters)}};
            return r;
          },
  });
  t.push_back({
      .name = "render_layer",
      .title = "Picture a layer's activations and gradients",
      .description =
          "PNG pictures of layers in the last captured batch, drawn by the same renderer as the web UI: one sample's "
          "activation and/or gradient, one tile per channel in a row (a [N,F] layer is one row of F pixels). Colours: "
          "a diverging scale centred on zero (blue negative, white zero, red positive) shared by all tiles, or a "
          "sequential scale for values=abs|square; NaN is a magenta/black checker, +Inf yellow, -Inf green. Each "
          "image comes with a caption giving the scale's end value, the tile layout and non-finite counts. A missing "
          "picture (no gradient in an eval phase) is replaced by its reason.",
      .args = {kLayers.mandatory(),
               kKind
                   .described(
                       "Which pictures per layer: the activation, the gradient flowing back into it, or both (two "
                       "images).")
                   .one_of({"activation", "gradient", "both"})
                   .or_else("both"),
               kSample,
               boolean_arg("include_input",
                           "Also picture the sample of the first model input (as render_input draws it), before the "
                           "layers' images.")
                   .or_else(false),
               kAverage, kValues},
      .rest = std::nullopt,
      .mcp = true,
      .read_only = true,
      .reply = "",
      .run = render_layer,
  });
  t.push_back({
      .name = "render_input",
      .title = "Picture a model input",
      .description =
          "A PNG of one sample of a model input in the last captured batch, as the image it was: undone "
          "normalisation (the session's input_mean/input_std) and the session's input transform where set; an "
          "input that is not an image ([N,F] features, tokens) is drawn as a colour strip, with a hint naming "
          "the option that would show it as an image. Use it beside render_layer to see what a layer responded "
          "to.",
      .args = {kSample,
               string_arg("input_name",
                          "The model input by name (get_architecture's inputs); omit for the first. NaNsense 0.4.0's "
                          "argument; input picks one by index instead.")
                   .not_empty(),
               integer_arg("input",
                           "Index of the model input (get_architecture's inputs, in order; default 0). Give input "
                           "or input_name, not both.")
                   .at_least(0),
               kShown},
      .rest = Route{"GET", "/api/render/input"},
      .mcp = true,
      .read_only = true,
      .reply = "InputInfo",
      .run =
          [](Controller& c, const Args& a) {
            int64_t input = a.optional_integer("input").value_or(0);
            if (const auto name = a.optional_string("input_name")) {
              const int64_t named = input_index(c, *name, "input_name");
              if (a.has("input") && named != input) {
                throw Refusal(Refusal::Kind::kInvalidArgument,
                              "input " + std::to_string(input) + " and input_name \"" + *name +
                                  "\" name different inputs: give one of them",
                              "input_name");
              }
              input = named;
            }
            Reply r;
            r.input = c.views().render_input(input, a.integer("sample"), shown_of(a));
            return r;
          },
  });
  return t;
}

}  // namespace nansense::server::command_parts
