#include "experiments/experiments.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "capture/tracer.h"
#include "common/dtype.h"
#include "observer/observer.h"

namespace nansense::experiments {

namespace {

// --- reaching a layer's activation -----------------------------------------

torch::Tensor first_floating(const std::vector<torch::Tensor>& outputs) {
  for (const auto& t : outputs) {
    if (t.is_floating_point() || t.is_complex()) return t;
  }
  return {};
}

// Counts the forward's top-level ops as the tracer does (its op sequence), and
// keeps one op's output, or every op's name and output.
class OpTap final : public observer::Consumer {
 public:
  explicit OpTap(int64_t target = -1) : target_(target) {}
  bool wants_backward() const override { return false; }
  void op_ended(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
                const std::vector<observer::Frame>&) override {
    const int64_t seq = seq_++;
    if (target_ < 0) {
      ops_.push_back(frame.op);
      outputs_.push_back(first_floating(outputs));
    } else if (seq == target_) {
      op_ = frame.op;
      output_ = first_floating(outputs);
    }
  }
  int64_t seq_ = 0;
  int64_t target_;
  std::vector<std::string> ops_;
  std::vector<torch::Tensor> outputs_;
  std::string op_;
  torch::Tensor output_;
};

// The forward's output and the named layer's activation, connected to the
// autograd graph. The first pass traces the forward like a capture batch
// (the tracer names the layers) and remembers which op made the layer's
// activation; later passes only count ops to that one (checked by name, and
// traced again when the forward took another path).
class LayerProbe {
 public:
  LayerProbe(torch::nn::Module& model, ForwardFn forward, std::string layer)
      : model_(model), forward_(std::move(forward)), layer_(std::move(layer)) {}

  struct Pass {
    torch::Tensor output;
    torch::Tensor activation;
  };

  Pass operator()(const std::vector<torch::Tensor>& inputs) {
    if (seq_ >= 0) {
      Pass pass;
      {
        observer::Observer observer;
        OpTap tap(seq_);
        observer.attach(&tap);
        pass.output = call(inputs);
        observer.detach(&tap);
        if (tap.op_ == op_ && tap.output_.defined()) {
          pass.activation = tap.output_;
          return pass;
        }
      }
    }
    return trace(inputs);
  }

  // The layer's description from the last trace.
  const LayerInfo& info() const { return info_; }

 private:
  torch::Tensor call(const std::vector<torch::Tensor>& inputs) {
    torch::Tensor out = forward_(inputs);
    if (!out.defined()) throw std::runtime_error("the model's forward returned no tensor");
    return out;
  }

  Pass trace(const std::vector<torch::Tensor>& inputs) {
    observer::Observer observer;
    capture::Tracer tracer(
        model_, observer,
        capture::Tracer::Keep{.cpu = false, .device = false, .device_layer = nullptr, .take = nullptr});
    OpTap tap;
    observer.attach(&tap);
    tracer.set_inputs(inputs, /*stacked=*/false);
    Pass pass;
    pass.output = call(inputs);
    observer.detach(&tap);
    auto result = tracer.finish();
    if (!result->error.empty()) throw std::runtime_error(result->error);
    const auto& names = result->layer_names;
    auto it = std::find(names.begin(), names.end(), layer_);
    if (it == names.end()) {
      std::string known;
      for (const auto& l : result->architecture->layers) {
        if (l.role != LayerInfo::Role::kInput && !l.shape_op) known += (known.empty() ? "" : ", ") + l.name;
      }
      throw std::invalid_argument("layer \"" + layer_ +
                                  "\" did not run in the experiment's forward (the model in "
                                  "eval mode); its layers: " +
                                  known);
    }
    const auto index = static_cast<size_t>(it - names.begin());
    const LayerInfo* info = result->architecture->find(layer_);
    if (!info) throw std::invalid_argument("layer \"" + layer_ + "\" is not in the traced architecture");
    info_ = *info;
    if (info_.role == LayerInfo::Role::kInput) {
      throw std::invalid_argument("\"" + layer_ + "\" is a model input; experiments look at what a layer computes");
    }
    const int64_t seq = result->final_op[index];
    if (seq < 0 || seq >= static_cast<int64_t>(tap.outputs_.size()) || !tap.outputs_[seq].defined()) {
      throw std::runtime_error("layer \"" + layer_ + "\" produced no floating-point activation");
    }
    seq_ = seq;
    op_ = tap.ops_[seq];
    pass.activation = tap.outputs_[seq];
    return pass;
  }

  torch::nn::Module& model_;
  ForwardFn forward_;
  std::string layer_;
  int64_t seq_ = -1;
  std::string op_;
  LayerInfo info_;
};

// Per sample, the mean of channel `channel` of `act` (-1: of the whole sample).
torch::Tensor channel_mean(const torch::Tensor& act, int64_t channel) {
  const int64_t n = act.size(0);
  if (channel < 0) return act.reshape({n, -1}).mean(1);
  return act.select(1, channel).reshape({n, -1}).mean(1);
}

void check_channel(const torch::Tensor& act, int64_t channel, const std::string& layer) {
  if (channel < 0) return;
  if (act.dim() < 2) {
    throw std::invalid_argument("layer \"" + layer + "\" has no channel dimension (its activation is " +
                                common::shape_text(act.sizes()) + "); use channel -1 for the whole layer");
  }
  if (channel >= act.size(1)) {
    throw std::invalid_argument("channel " + std::to_string(channel) + " is out of range: layer \"" + layer +
                                "\" has " + std::to_string(act.size(1)) + " channels (0.." +
                                std::to_string(act.size(1) - 1) + ")");
  }
}

// Gauss-Legendre nodes and weights on [0, 1] (Captum's default integration).
void gauss_legendre(int64_t n, std::vector<double>& nodes, std::vector<double>& weights) {
  nodes.assign(static_cast<size_t>(n), 0);
  weights.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    double x = std::cos(std::numbers::pi * (static_cast<double>(i) + 0.75) / (static_cast<double>(n) + 0.5));
    double dp = 1;
    for (int iter = 0; iter < 100; ++iter) {
      double p0 = 1, p1 = x;
      for (int64_t k = 2; k <= n; ++k) {
        const double p2 =
            ((2.0 * static_cast<double>(k) - 1) * x * p1 - (static_cast<double>(k) - 1) * p0) / static_cast<double>(k);
        p0 = p1;
        p1 = p2;
      }
      dp = static_cast<double>(n) * (x * p1 - p0) / (x * x - 1);
      const double dx = p1 / dp;
      x -= dx;
      if (std::abs(dx) < 1e-15) break;
    }
    nodes[static_cast<size_t>(i)] = (1 - x) / 2;                    // ascending from 0 to 1
    weights[static_cast<size_t>(i)] = 1 / ((1 - x * x) * dp * dp);  // 2/((1-x²)P'²) halved for [0,1]
  }
}

// Samples evaluated per forward when a method batches many perturbed inputs.
constexpr int64_t kChunk = 128;

struct Runner {
  const KindSpec& kind;
  const std::string& layer;
  const json& params;
  Context& ctx;
  Result& result;
  LayerProbe probe;

  Runner(const KindSpec& k, const std::string& l, const json& p, Context& c, Result& r)
      : kind(k), layer(l), params(p), ctx(c), result(r), probe(*c.model, c.forward, l) {}

  int64_t integer(const char* key) const { return params.at(key).get<int64_t>(); }
  double number(const char* key) const { return params.at(key).get<double>(); }
  bool flag(const char* key) const { return params.at(key).get<bool>(); }

  bool stopped() {
    if (!ctx.should_stop) return false;
    if (auto reason = ctx.should_stop()) {
      result.stage = Result::Stage::kStopped;
      result.stop_reason = *reason;
      return true;
    }
    return false;
  }
  void publish() {
    if (ctx.progress) ctx.progress(result);
  }

  // A model with several inputs: experiments work on the first and hold the
  // others fixed, sample by sample. `others` are their samples [first,
  // first + count); `inputs(x)` pairs x with them, repeated when x stacks
  // several copies of those samples (integration steps, occluded copies).
  std::vector<torch::Tensor> others;
  int64_t others_count = 1;

  void hold_others(int64_t first, int64_t count) {
    others.clear();
    others_count = count;
    const int64_t n = ctx.inputs[0].size(0);
    for (size_t i = 1; i < ctx.inputs.size(); ++i) {
      const torch::Tensor& t = ctx.inputs[i];
      if (t.dim() == 0 || t.size(0) != n) {
        throw std::invalid_argument(
            "experiments work on the model's first input and hold its other inputs fixed, sample by sample; input " +
            std::to_string(i) + " is " + common::shape_text(t.sizes()) + ", not " + std::to_string(n) +
            " samples along its first dimension like the first input " + common::shape_text(ctx.inputs[0].sizes()));
      }
      others.push_back(t.narrow(0, first, count).detach());
    }
  }

  std::vector<torch::Tensor> inputs(const torch::Tensor& x) {
    std::vector<torch::Tensor> all{x};
    const int64_t copies = x.size(0) / others_count;
    for (const auto& o : others) {
      if (copies == 1) {
        all.push_back(o);
        continue;
      }
      std::vector<int64_t> times(static_cast<size_t>(o.dim()), 1);
      times[0] = copies;
      all.push_back(o.repeat(times));
    }
    return all;
  }

  // The first `batch` samples of the (first) model input.
  torch::Tensor batch_input(bool need_image) {
    if (ctx.inputs.empty()) throw std::invalid_argument("the captured batch has no model input");
    torch::Tensor x = ctx.inputs[0];
    if (!x.is_floating_point()) {
      throw std::invalid_argument("the model input is " + std::string(c10::toString(x.scalar_type())) +
                                  ", not floating point: gradients with respect to it do not exist");
    }
    if (x.dim() < 2)
      throw std::invalid_argument("the model input " + common::shape_text(x.sizes()) + " has no batch dimension");
    if (need_image && x.dim() != 4) {
      throw std::invalid_argument(kind.title + " needs image inputs [N,C,H,W]; the model input is " +
                                  common::shape_text(x.sizes()));
    }
    int64_t b = params.contains("batch") ? integer("batch") : 1;
    if (b > x.size(0)) {
      result.notes.push_back("batch " + std::to_string(b) + " lowered to the " + std::to_string(x.size(0)) +
                             " samples at hand");
      b = x.size(0);
    }
    hold_others(0, b);
    return x.narrow(0, 0, b).detach().clone();
  }

  torch::Tensor grad_of(const torch::Tensor& y, const torch::Tensor& x) {
    return torch::autograd::grad({y}, {x}, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                 /*allow_unused=*/true)[0];
  }

  void attribution_result(const torch::Tensor& x, const torch::Tensor& attr) {
    result.inputs = x.detach().cpu();
    result.attributions = attr.detach().cpu();
    result.attribution_sums.clear();
    auto sums = result.attributions.reshape({result.attributions.size(0), -1}).sum(1).to(torch::kDouble);
    for (int64_t i = 0; i < sums.size(0); ++i) result.attribution_sums.push_back(sums[i].item<double>());
  }

  void values_of(const torch::Tensor& v) {
    result.target_values.clear();
    auto d = v.detach().cpu().to(torch::kDouble);
    for (int64_t i = 0; i < d.size(0); ++i) result.target_values.push_back(d[i].item<double>());
  }

  void gradcam() {
    torch::Tensor x = batch_input(false);
    auto pass = probe(inputs(x));
    const torch::Tensor& act = pass.activation;
    if (act.dim() < 3) {
      throw std::invalid_argument("Grad-CAM needs a layer with spatial maps ([N,C,H,W] or [N,C,L]); \"" + layer +
                                  "\" gives " + common::shape_text(act.sizes()));
    }
    if (pass.output.dim() != 2) {
      throw std::invalid_argument("Grad-CAM needs a model output of [batch, classes]; this model returns " +
                                  common::shape_text(pass.output.sizes()));
    }
    const int64_t classes = pass.output.size(1);
    const int64_t target = integer("target");
    if (target >= classes) {
      throw std::invalid_argument("target class " + std::to_string(target) + " is out of range: the model has " +
                                  std::to_string(classes) + " classes (0.." + std::to_string(classes - 1) + ")");
    }
    torch::Tensor targets = target < 0
                                ? pass.output.detach().argmax(1)
                                : torch::full({x.size(0)}, target, torch::dtype(torch::kLong).device(x.device()));
    torch::Tensor score = pass.output.gather(1, targets.unsqueeze(1)).squeeze(1);
    values_of(score);
    torch::Tensor g = grad_of(score.sum(), act);
    if (!g.defined()) throw std::runtime_error("the class score does not depend on layer \"" + layer + "\"");
    std::vector<int64_t> spatial;
    for (int64_t d = 2; d < act.dim(); ++d) spatial.push_back(d);
    torch::Tensor alpha = g.mean(spatial, /*keepdim=*/true);
    torch::Tensor cam = torch::relu((alpha * act.detach()).sum(1));
    auto t = targets.cpu();
    result.targets.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    attribution_result(x, cam);
    result.step = result.total = 1;
  }

  torch::Tensor target_of(const torch::Tensor& act, int64_t channel) {
    check_channel(act, channel, layer);
    return channel_mean(act, channel);
  }

  void neuron_gradient() {
    torch::Tensor x = batch_input(false).requires_grad_(true);
    auto pass = probe(inputs(x));
    torch::Tensor f = target_of(pass.activation, integer("channel"));
    values_of(f);
    torch::Tensor g = grad_of(f.sum(), x);
    if (!g.defined()) g = torch::zeros_like(x);
    attribution_result(x, g);
    result.step = result.total = 1;
  }

  void neuron_ig() {
    torch::Tensor x = batch_input(false);
    const int64_t channel = integer("channel");
    const int64_t steps = integer("ig_steps");
    std::vector<double> nodes, weights;
    gauss_legendre(steps, nodes, weights);
    const int64_t b = x.size(0);
    // F(x) - F(0): completeness says the attributions add up to it.
    {
      torch::NoGradGuard no_grad;
      auto pass = probe(inputs(torch::cat({x, torch::zeros_like(x)})));
      torch::Tensor f = target_of(pass.activation, channel);
      values_of(f.narrow(0, 0, b) - f.narrow(0, b, b));
    }
    torch::Tensor total = torch::zeros_like(x);
    std::vector<int64_t> shape{0, b};
    for (int64_t d = 1; d < x.dim(); ++d) shape.push_back(x.size(d));
    std::vector<int64_t> weight_shape(shape.size(), 1);
    const int64_t per_chunk = std::max<int64_t>(1, kChunk / b);
    result.total = steps;
    for (int64_t s = 0; s < steps; s += per_chunk) {
      if (stopped()) return;
      const int64_t n = std::min(per_chunk, steps - s);
      std::vector<torch::Tensor> scaled;
      for (int64_t j = 0; j < n; ++j) scaled.push_back(x * nodes[static_cast<size_t>(s + j)]);
      torch::Tensor path = torch::cat(scaled).requires_grad_(true);
      auto pass = probe(inputs(path));
      torch::Tensor g = grad_of(target_of(pass.activation, channel).sum(), path);
      if (!g.defined()) g = torch::zeros_like(path);
      shape[0] = n;
      weight_shape[0] = n;
      std::vector<double> w(weights.begin() + s, weights.begin() + s + n);
      torch::Tensor wt = torch::tensor(w, torch::kDouble).to(x.options()).reshape(weight_shape);
      total += (g.detach().reshape(shape) * wt).sum(0);
      result.step = s + n;
      publish();
    }
    attribution_result(x, x * total);
  }

  void occlusion() {
    torch::Tensor x = batch_input(true);
    const int64_t channel = integer("channel");
    const int64_t window = integer("window");
    const int64_t stride = integer("stride");
    const int64_t b = x.size(0), h = x.size(2), w = x.size(3);
    if (window > h || window > w) {
      throw std::invalid_argument("window " + std::to_string(window) + " is larger than the input's " +
                                  std::to_string(h) + "x" + std::to_string(w) + " pixels");
    }
    std::vector<std::pair<int64_t, int64_t>> at;
    for (int64_t y = 0; y + window <= h; y += stride) {
      for (int64_t xx = 0; xx + window <= w; xx += stride) at.emplace_back(y, xx);
    }
    torch::NoGradGuard no_grad;
    torch::Tensor base = target_of(probe(inputs(x)).activation, channel);
    values_of(base);
    torch::Tensor attr = torch::zeros_like(x);
    torch::Tensor count = torch::zeros({h, w}, x.options());
    const int64_t per_chunk = std::max<int64_t>(1, kChunk / b);
    const auto n_at = static_cast<int64_t>(at.size());
    result.total = n_at;
    for (int64_t s = 0; s < n_at; s += per_chunk) {
      if (stopped()) return;
      const int64_t n = std::min(per_chunk, n_at - s);
      std::vector<torch::Tensor> copies;
      for (int64_t j = 0; j < n; ++j) {
        auto [y, xx] = at[static_cast<size_t>(s + j)];
        torch::Tensor c = x.clone();
        c.narrow(2, y, window).narrow(3, xx, window).zero_();
        copies.push_back(c);
      }
      torch::Tensor f = target_of(probe(inputs(torch::cat(copies))).activation, channel).reshape({n, b});
      torch::Tensor diff = base.unsqueeze(0) - f;
      for (int64_t j = 0; j < n; ++j) {
        auto [y, xx] = at[static_cast<size_t>(s + j)];
        attr.narrow(2, y, window).narrow(3, xx, window) += diff[j].reshape({b, 1, 1, 1});
        count.narrow(0, y, window).narrow(1, xx, window) += 1;
      }
      result.step = s + n;
      publish();
    }
    // Values no window covered (a stride that does not reach the edge) stay 0.
    attr = torch::where(count > 0, attr / count.clamp_min(1), torch::zeros_like(attr));
    attribution_result(x, attr);
  }

  // Deep Dream's displayable range per input channel: [0,1] mapped through
  // the input normalisation.
  std::pair<torch::Tensor, torch::Tensor> clamp_bounds(const torch::Tensor& x) {
    const int64_t c = x.dim() >= 2 ? x.size(1) : 1;
    std::vector<double> mean = ctx.mean, std = ctx.std;
    auto fit = [&](std::vector<double>& v, double fallback, const char* name) {
      if (v.empty()) v.assign(1, fallback);
      if (v.size() != 1 && static_cast<int64_t>(v.size()) != c) {
        result.notes.push_back(std::string("input_") + name + " has " + std::to_string(v.size()) + " values for " +
                               std::to_string(c) + " channels: clamped to [0,1] unnormalised");
        mean.assign(1, 0);
        std.assign(1, 1);
      }
    };
    fit(mean, 0, "mean");
    fit(std, 1, "std");
    std::vector<double> lo, hi;
    for (size_t i = 0; i < mean.size() || i < std.size(); ++i) {
      const double m = mean[std::min(i, mean.size() - 1)], sd = std[std::min(i, std.size() - 1)];
      lo.push_back((0 - m) / sd);
      hi.push_back((1 - m) / sd);
    }
    std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
    if (x.dim() >= 2 && lo.size() > 1) shape[1] = static_cast<int64_t>(lo.size());
    auto as = [&](const std::vector<double>& v) {
      return torch::tensor(v, torch::kDouble).to(x.options()).reshape(shape);
    };
    return {as(lo), as(hi)};
  }

  static torch::Tensor centre_zoom(const torch::Tensor& x, double zoom) {
    const int64_t h = x.size(2), w = x.size(3);
    const auto zh = static_cast<int64_t>(std::lround(static_cast<double>(h) * zoom));
    const auto zw = static_cast<int64_t>(std::lround(static_cast<double>(w) * zoom));
    if (zh == h && zw == w) return x;
    namespace F = torch::nn::functional;
    torch::Tensor big = F::interpolate(
        x, F::InterpolateFuncOptions().size(std::vector<int64_t>{zh, zw}).mode(torch::kBilinear).align_corners(false));
    return big.narrow(2, (zh - h) / 2, h).narrow(3, (zw - w) / 2, w).contiguous();
  }

  void deep_dream() {
    if (ctx.inputs.empty()) throw std::invalid_argument("the captured batch has no model input");
    const torch::Tensor real = ctx.inputs[0].detach();
    if (!real.is_floating_point() || real.dim() < 2) {
      throw std::invalid_argument("Deep Dream needs a floating-point model input with a batch dimension; it is " +
                                  common::shape_text(real.sizes()) + " " + common::dtype_name(real.scalar_type()));
    }
    const bool image = real.dim() == 4;
    const bool from_sample = params.at("start") == "sample";
    const int64_t sample = from_sample ? integer("sample") : 0;
    if (sample >= real.size(0)) {
      throw std::invalid_argument("sample " + std::to_string(sample) + " is out of range: the batch at hand has " +
                                  std::to_string(real.size(0)) + " samples (0.." + std::to_string(real.size(0) - 1) +
                                  ")");
    }
    // Every dream is paired with the same sample of the other inputs.
    hold_others(sample, 1);
    int64_t channels_in_layer = 0;
    {
      torch::NoGradGuard no_grad;
      torch::Tensor act = probe(inputs(real.narrow(0, sample, 1))).activation;
      if (act.dim() < 2) {
        throw std::invalid_argument("Deep Dream needs a layer with a channel dimension; \"" + layer + "\" gives " +
                                    common::shape_text(act.sizes()));
      }
      channels_in_layer = act.size(1);
    }
    int64_t n = integer("channels");
    if (n > channels_in_layer) {
      result.notes.push_back("channels " + std::to_string(n) + " lowered to the layer's " +
                             std::to_string(channels_in_layer));
      n = channels_in_layer;
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(ctx.seed);
    std::vector<int64_t> shape{n};
    for (int64_t d = 1; d < real.dim(); ++d) shape.push_back(real.size(d));
    torch::Tensor x;
    if (from_sample) {
      x = real[sample].unsqueeze(0).expand(shape).clone();
    } else {
      const double mean = real.mean().item<double>();
      const double std = real.dim() > 0 && real.numel() > 1 ? real.std().item<double>() : 1.0;
      x = (torch::randn(shape, gen, torch::kFloat) * std + mean).to(real.options());
    }
    const bool clamp = flag("clamp");
    auto [lo, hi] = clamp_bounds(x);
    if (clamp) x = torch::max(torch::min(x, hi), lo);
    const double lr = number("lr") * (flag("minimize") ? -1 : 1);
    const double diffusion = number("diffusion");
    const double zoom = number("zoom");
    const int64_t jitter = integer("jitter");
    const int64_t steps = integer("steps");
    const int64_t every = flag("all_steps") ? 1 : std::max<int64_t>(1, steps / 20);
    torch::Tensor index = torch::arange(n, torch::dtype(torch::kLong).device(x.device()));
    for (int64_t i = 0; i < n; ++i) result.channels.push_back(i);
    result.start = x.cpu();
    result.images = result.start;
    result.total = steps;
    publish();
    std::vector<int64_t> dims{2, 3};
    for (int64_t step = 0; step < steps; ++step) {
      if (stopped()) break;
      int64_t dy = 0, dx = 0;
      if (image && jitter > 0) {
        dy = torch::randint(-jitter, jitter + 1, {1}, gen).item<int64_t>();
        dx = torch::randint(-jitter, jitter + 1, {1}, gen).item<int64_t>();
        x = torch::roll(x, {dy, dx}, dims);
      }
      torch::Tensor xg = x.detach().requires_grad_(true);
      torch::Tensor act = probe(inputs(xg)).activation;
      // Sample i's objective: channel i's mean activation.
      torch::Tensor obj = act.index({index, index}).reshape({n, -1}).mean(1);
      torch::Tensor g = grad_of(obj.sum(), xg);
      if (!g.defined()) g = torch::zeros_like(xg);
      std::vector<int64_t> per_sample(static_cast<size_t>(x.dim()), 1);
      per_sample[0] = n;
      torch::Tensor scale = g.abs().reshape({n, -1}).mean(1).add(1e-8).reshape(per_sample);
      x = xg.detach() + lr * (g / scale);
      if (image && jitter > 0) x = torch::roll(x, {-dy, -dx}, dims);
      if (image && diffusion > 0) {
        torch::Tensor blurred = torch::avg_pool2d(x, 3, 1, 1, /*ceil_mode=*/false, /*count_include_pad=*/false);
        x = x * (1 - diffusion) + blurred * diffusion;
      }
      if (image && zoom > 1) x = centre_zoom(x, zoom);
      if (clamp) x = torch::max(torch::min(x, hi), lo);
      const double objective = obj.detach().mean().item<double>();
      result.objectives.push_back(objective);
      result.objective = objective;
      result.step = step + 1;
      if (result.step % every == 0 || result.step == steps) {
        result.images = x.detach().cpu();
        publish();
      }
    }
    result.images = x.detach().cpu();
  }

  void run() {
    if (kind.kind == "deep_dream") {
      deep_dream();
    } else if (kind.kind == "gradcam") {
      gradcam();
    } else if (kind.kind == "neuron_gradient") {
      neuron_gradient();
    } else if (kind.kind == "neuron_ig") {
      neuron_ig();
    } else if (kind.kind == "occlusion") {
      occlusion();
    } else {
      throw std::invalid_argument("unknown experiment kind \"" + kind.kind + "\"");
    }
    if (result.stage != Result::Stage::kStopped) result.stage = Result::Stage::kDone;
  }
};

}  // namespace

void run(const KindSpec& kind, const std::string& layer, const json& params, Context& context, Result& result) {
  if (!context.model) throw std::invalid_argument("no model");
  if (!context.forward) {
    throw std::invalid_argument(
        "the session does not know how to call the model's forward: start() finds it for a "
        "TORCH_MODULE model whose forward takes one or two tensors; otherwise call "
        "session.set_forward(...)");
  }
  // A pause inside a validation loop may sit under NoGradGuard or InferenceMode.
  c10::InferenceMode no_inference(false);
  torch::AutoGradMode grad_on(true);
  Runner runner(kind, layer, params, context, result);
  runner.run();
}

}  // namespace nansense::experiments
