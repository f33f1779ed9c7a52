// Frozen moments: a paused debugger view saved to a file and rebuilt later
// around a fresh model, the backing of a locked, shared demo (examples/
// playground, docs/guide/moments.md). Session::freeze_moment writes one;
// load_moment reads it.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nansense/errors.h"
#include "nansense/options.h"
#include "nansense/session.h"

namespace nansense {

// A moment file that cannot be read (missing, truncated, damaged, another
// kind of nansense file, or not a nansense file at all) or that does not fit
// the model it is loaded into. The message names the file and what differs.
class MomentError : public Error {
 public:
  using Error::Error;
};

// The training step's forward in miniature: given the model and the frozen
// batch's loader item (its tensors, in ItemTensors order: a torch::data
// Example is {data, target}) it returns the loss, e.g.
//   [](torch::nn::Module& m, const std::vector<torch::Tensor>& item) {
//     return torch::nll_loss(net->forward(item[0]), item[1]); }
// load_moment runs it once and calls backward() on the loss itself.
using ReplayFn = std::function<torch::Tensor(torch::nn::Module& model, const std::vector<torch::Tensor>& item)>;

namespace detail {
// load_moment, with the forward experiments call (empty: none).
Session load_moment_with(std::shared_ptr<torch::nn::Module> model, const std::string& path, ReplayFn replay,
                         std::optional<ServeOptions> serve, Session::ForwardFn forward);
}  // namespace detail

// Rebuilds the moment frozen at `path` around `model`, a fresh instance of
// the architecture it was frozen from: checks the parameter names and shapes
// against the file (MomentError naming the first that differs), loads the
// parameters and buffers the frozen batch began with, runs `replay` once to
// regenerate that batch's activations and gradients (they are not stored:
// the file stays the size of the weights), then the weights the batch ended
// with, and publishes the snapshot at the frozen position. The returned
// session shows exactly the frozen pause: the snapshot, the statistics as
// they were (scope kNone, so they stay frozen), the watched set, the
// schedule's totals and the optimizer state. Nothing trains: follow with
// lock() and park() to serve it to many visitors. The replay assumes a
// deterministic forward (no dropout; the model is in the train/eval mode
// the batch ran in). `serve` serves the UI once the moment is in place.
Session load_moment(std::shared_ptr<torch::nn::Module> model, const std::string& path, ReplayFn replay,
                    std::optional<ServeOptions> serve = std::nullopt);

// A model made with TORCH_MODULE: experiments also get its forward, as
// nansense::start gives them.
template <class Impl>
Session load_moment(const torch::nn::ModuleHolder<Impl>& model, const std::string& path, ReplayFn replay,
                    std::optional<ServeOptions> serve = std::nullopt) {
  std::shared_ptr<Impl> impl = model.ptr();
  Session::ForwardFn forward;
  if constexpr (requires(Impl & m, const torch::Tensor& x) {
                  { m.forward(x) } -> std::convertible_to<torch::Tensor>;
                }) {
    forward = [impl](const std::vector<torch::Tensor>& in) -> torch::Tensor {
      if (in.size() != 1)
        throw ArgumentError("the model's forward takes 1 input, the batch has " + std::to_string(in.size()));
      return impl->forward(in[0]);
    };
  }
  return detail::load_moment_with(std::static_pointer_cast<torch::nn::Module>(impl), path, std::move(replay),
                                  std::move(serve), std::move(forward));
}

}  // namespace nansense
