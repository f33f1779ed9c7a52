#include "values.h"

#include <pybind11/stl.h>
#include <torch/extension.h>

#include <cmath>
#include <memory>
#include <optional>

#include "common/dtype.h"
#include "experiments/engine.h"
#include "experiments/experiments.h"
#include "experiments/probe.h"
#include "nansense/nansense.h"

namespace nansense::python {

namespace {

// None for an undefined tensor.
std::optional<torch::Tensor> tensor_or_none(const torch::Tensor& t) {
  return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
}
// A published view's tensor, for Python: a clone, so that a user's in-place
// edit cannot change what every other reader sees.
std::optional<torch::Tensor> clone_or_none(const torch::Tensor& t) {
  return t.defined() ? std::optional<torch::Tensor>(t.clone()) : std::nullopt;
}

}  // namespace

std::map<std::string, torch::Tensor> clones(const std::map<std::string, torch::Tensor>& in) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : in) out.emplace(name, t.defined() ? t.clone() : t);
  return out;
}
std::map<std::string, std::map<std::string, torch::Tensor>> clones(
    const std::map<std::string, std::map<std::string, torch::Tensor>>& in) {
  std::map<std::string, std::map<std::string, torch::Tensor>> out;
  for (const auto& [name, inner] : in) out.emplace(name, clones(inner));
  return out;
}
std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& in) {
  std::vector<torch::Tensor> out;
  out.reserve(in.size());
  for (const auto& t : in) out.push_back(t.defined() ? t.clone() : t);
  return out;
}

py::object to_python(const nlohmann::json& j) {
  using value_t = nlohmann::json::value_t;
  switch (j.type()) {
    case value_t::object: {
      py::dict d;
      for (const auto& [key, value] : j.items()) d[py::str(key)] = to_python(value);
      return d;
    }
    case value_t::array: {
      py::list l(j.size());
      size_t i = 0;
      for (const auto& value : j) l[i++] = to_python(value);
      return l;
    }
    case value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case value_t::boolean:
      return py::bool_(j.get<bool>());
    case value_t::number_integer:
      return py::int_(j.get<int64_t>());
    case value_t::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case value_t::number_float: {
      // JSON has no literal for a non-finite number: the text said null.
      const double v = j.get<double>();
      return std::isfinite(v) ? py::object(py::float_(v)) : py::none();
    }
    default:  // null, discarded, binary
      return py::none();
  }
}

nlohmann::json json_of(py::handle value) {
  if (value.is_none()) return nullptr;
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    auto out = nlohmann::json::object();
    for (auto [key, item] : value.cast<py::dict>()) out[key.cast<std::string>()] = json_of(item);
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    auto out = nlohmann::json::array();
    for (auto item : value) out.push_back(json_of(item));
    return out;
  }
  throw py::type_error("a JSON value (None, bool, int, float, str, list or dict) was expected, got " +
                       std::string(py::str(py::type::of(value).attr("__name__"))));
}

void bind_positions(py::module_& m) {
  py::class_<BatchPosition>(m, "BatchPosition")
      .def_readonly("phase", &BatchPosition::phase)
      .def_readonly("epoch", &BatchPosition::epoch)
      .def_readonly("batch_idx", &BatchPosition::batch_idx)
      .def_readonly("is_last_in_phase", &BatchPosition::is_last_in_phase)
      .def_readonly("is_last_in_epoch", &BatchPosition::is_last_in_epoch)
      .def_readonly("is_last_in_run", &BatchPosition::is_last_in_run)
      .def("__repr__", &BatchPosition::to_string);
  py::class_<TrainerStep>(m, "TrainerStep")
      .def_readonly("global_step", &TrainerStep::global_step)
      .def_readonly("micro_batches", &TrainerStep::micro_batches)
      .def_readonly("micro_batch", &TrainerStep::micro_batch);
  py::class_<ScheduleRead>(m, "ScheduleRead")
      .def_readonly("epochs", &ScheduleRead::epochs)
      .def_readonly("phases", &ScheduleRead::phases)
      .def_readonly("phase_order", &ScheduleRead::phase_order);
}

void bind_stats(py::module_& m) {
  py::class_<TensorStatsSnapshot>(m, "TensorStatsSnapshot")
      .def_readonly("n", &TensorStatsSnapshot::n)
      .def_readonly("sum", &TensorStatsSnapshot::sum)
      .def_readonly("sum_sq", &TensorStatsSnapshot::sum_sq)
      .def_readonly("min", &TensorStatsSnapshot::min)
      .def_readonly("max", &TensorStatsSnapshot::max)
      .def_readonly("nan", &TensorStatsSnapshot::nan)
      .def_readonly("pos_inf", &TensorStatsSnapshot::pos_inf)
      .def_readonly("neg_inf", &TensorStatsSnapshot::neg_inf)
      .def_readonly("hist", &TensorStatsSnapshot::hist)
      .def_readonly("channel_hists", &TensorStatsSnapshot::channel_hists)
      .def_readonly("channels", &TensorStatsSnapshot::channels)
      .def_readonly("binned", &TensorStatsSnapshot::binned)
      .def_readonly("median", &TensorStatsSnapshot::median)
      .def_readonly("dead_count", &TensorStatsSnapshot::dead_count)
      .def_readonly("dead_channels", &TensorStatsSnapshot::dead_channels)
      // As every reply spells a dtype ("bfloat16"); None before any tensor.
      .def_property_readonly("dtype", [](const TensorStatsSnapshot& t) -> std::optional<std::string> {
        if (t.dtype == c10::ScalarType::Undefined) return std::nullopt;
        return common::dtype_name(t.dtype);
      });

  py::class_<PatchSlot>(m, "PatchSlot")
      .def_readonly("filled", &PatchSlot::filled)
      .def_readonly("score", &PatchSlot::score)
      .def_readonly("batch", &PatchSlot::batch)
      .def_readonly("sample", &PatchSlot::sample)
      .def_readonly("y", &PatchSlot::y)
      .def_readonly("x", &PatchSlot::x)
      .def_readonly("top", &PatchSlot::top)
      .def_readonly("left", &PatchSlot::left);
  py::class_<PatchGallery>(m, "PatchGallery")
      .def_property_readonly("ranking", [](const PatchGallery& g) { return std::string(to_string(g.ranking)); })
      .def_readonly("samples", &PatchGallery::samples)
      .def_readonly("channels", &PatchGallery::channels)
      .def_readonly("input_height", &PatchGallery::input_height)
      .def_readonly("input_width", &PatchGallery::input_width)
      .def_readonly("slots", &PatchGallery::slots)
      .def_property_readonly("crops", [](const PatchGallery& g) { return clone_or_none(g.crops); })
      .def_property_readonly("heat", [](const PatchGallery& g) { return clone_or_none(g.heat); });

  py::class_<LayerStatsSnapshot>(m, "LayerStatsSnapshot")
      .def_readonly("layer", &LayerStatsSnapshot::layer)
      .def_readonly("phase", &LayerStatsSnapshot::phase)
      .def_readonly("epoch", &LayerStatsSnapshot::epoch)
      .def_readonly("batches", &LayerStatsSnapshot::batches)
      .def_readonly("activation", &LayerStatsSnapshot::activation)
      .def_readonly("gradient", &LayerStatsSnapshot::gradient)
      .def_readonly("patches", &LayerStatsSnapshot::patches)
      .def_readonly("patches_note", &LayerStatsSnapshot::patches_note)
      .def_readonly("patches_skipped", &LayerStatsSnapshot::patches_skipped);

  py::class_<ParameterSample>(m, "ParameterSample")
      .def_readonly("epoch", &ParameterSample::epoch)
      .def_readonly("value_norm", &ParameterSample::value_norm)
      .def_readonly("mean", &ParameterSample::mean)
      .def_readonly("std", &ParameterSample::std)
      .def_readonly("min", &ParameterSample::min)
      .def_readonly("max", &ParameterSample::max)
      .def_readonly("grad_norm", &ParameterSample::grad_norm)
      .def_readonly("grad_mean", &ParameterSample::grad_mean)
      .def_readonly("grad_std", &ParameterSample::grad_std)
      .def_readonly("grad_min", &ParameterSample::grad_min)
      .def_readonly("grad_max", &ParameterSample::grad_max)
      .def_readonly("update_ratio", &ParameterSample::update_ratio)
      .def_readonly("median", &ParameterSample::median);

  py::class_<ScalarPoint>(m, "ScalarPoint")
      .def_readonly("epoch", &ScalarPoint::epoch)
      .def_readonly("batch", &ScalarPoint::batch)
      .def_readonly("x", &ScalarPoint::x)
      .def_readonly("value", &ScalarPoint::value);
  py::class_<SeriesView>(m, "SeriesView")
      .def_readonly("name", &SeriesView::name)
      .def_readonly("phase", &SeriesView::phase)
      .def_readonly("layer", &SeriesView::layer)
      .def_readonly("points", &SeriesView::points);

  // The published view itself, held (not copied) while Python reads it: it
  // is immutable, and its tensors leave only as clones (PatchGallery).
  py::class_<WatchSnapshot, std::shared_ptr<WatchSnapshot>>(m, "WatchSnapshot")
      .def_readonly("sequence", &WatchSnapshot::sequence)
      .def_readonly("ranks", &WatchSnapshot::ranks)
      // Every (layer, phase, epoch) bucket, by layer and phase, then epoch.
      .def_property_readonly(
          "buckets",
          [](const WatchSnapshot& s) {
            std::vector<const LayerStatsSnapshot*> out;
            for (const auto& [key, buckets] : s.layers) {
              for (const auto& b : buckets) out.push_back(&b);
            }
            return out;
          },
          py::return_value_policy::reference_internal)
      .def_readonly("parameters", &WatchSnapshot::parameters)
      .def_readonly("owner", &WatchSnapshot::owner)
      .def_readonly("series", &WatchSnapshot::series);

  // An instrument's context: a copy of the struct, whose tensors are the
  // live ones (the instrument reads them on the training thread). The
  // activation and the weight are always there; a gradient may not be.
  py::class_<LayerContext>(m, "LayerContext")
      .def_readonly("layer", &LayerContext::layer)
      .def_readonly("phase", &LayerContext::phase)
      .def_readonly("position", &LayerContext::position)
      .def_readonly("activation", &LayerContext::activation)
      .def_property_readonly("gradient", [](const LayerContext& c) { return tensor_or_none(c.gradient); })
      .def_readonly("weights", &LayerContext::weights)
      .def_readonly("weight_gradients", &LayerContext::weight_gradients);
  py::class_<WeightContext>(m, "WeightContext")
      .def_readonly("layer", &WeightContext::layer)
      .def_readonly("parameter", &WeightContext::parameter)
      .def_readonly("phase", &WeightContext::phase)
      .def_readonly("position", &WeightContext::position)
      .def_readonly("weight", &WeightContext::weight)
      .def_property_readonly("gradient", [](const WeightContext& c) { return tensor_or_none(c.gradient); })
      .def_readonly("optimizer_state", &WeightContext::optimizer_state)
      .def_readonly("hyperparams", &WeightContext::hyperparams);
}

void bind_runs(py::module_& m) {
  // A published snapshot, held while Python reads it; each read is a clone.
  py::class_<BatchSnapshot, std::shared_ptr<BatchSnapshot>>(m, "BatchSnapshot")
      .def_readonly("position", &BatchSnapshot::position)
      .def_readonly("sequence", &BatchSnapshot::sequence)
      .def_property_readonly("layer_names",
                             [](const BatchSnapshot& s) {
                               std::vector<std::string> names;
                               if (s.architecture) {
                                 for (const auto& l : s.architecture->layers) names.push_back(l.name);
                               }
                               return names;
                             })
      .def_property_readonly("activations", [](const BatchSnapshot& s) { return clones(s.activations); })
      .def_property_readonly("activation_gradients",
                             [](const BatchSnapshot& s) { return clones(s.activation_gradients); })
      .def_property_readonly("weights", [](const BatchSnapshot& s) { return clones(s.weights); })
      .def_property_readonly("weight_gradients", [](const BatchSnapshot& s) { return clones(s.weight_gradients); })
      .def_property_readonly("optimizer_state", [](const BatchSnapshot& s) { return clones(s.optimizer_state); })
      .def_readonly("optimizer_hyperparams", &BatchSnapshot::optimizer_hyperparams)
      .def_property_readonly("inputs", [](const BatchSnapshot& s) { return clones(s.inputs); })
      .def_property_readonly("custom_activations", [](const BatchSnapshot& s) { return clones(s.custom_activations); })
      .def_property_readonly("custom_weight_tensors",
                             [](const BatchSnapshot& s) { return clones(s.custom_weight_tensors); });

  py::class_<TimeTravelStatus>(m, "TimeTravelStatus")
      .def_readonly("available", &TimeTravelStatus::available)
      .def_readonly("reason", &TimeTravelStatus::reason)
      .def_readonly("cached_epochs", &TimeTravelStatus::cached_epochs)
      .def_readonly("total_epochs", &TimeTravelStatus::total_epochs)
      .def_readonly("current_epoch", &TimeTravelStatus::current_epoch)
      .def_readonly("pending_epoch", &TimeTravelStatus::pending_epoch)
      .def_readonly("cache_dir", &TimeTravelStatus::cache_dir);

  // The probe's last run: activations and inputs are clones, None when the
  // run failed.
  using experiments::ProbeResult;
  py::class_<ProbeResult, std::shared_ptr<ProbeResult>>(m, "ProbeResult")
      .def_readonly("run", &ProbeResult::run)
      .def_readonly("position", &ProbeResult::position)
      .def_readonly("diff", &ProbeResult::diff)
      .def_readonly("perturbations_applied", &ProbeResult::perturbations_applied)
      .def_readonly("error", &ProbeResult::error)
      .def_property_readonly(
          "activations",
          [](const ProbeResult& r) { return r.view ? std::optional(clones(r.view->activations)) : std::nullopt; })
      .def_property_readonly(
          "inputs", [](const ProbeResult& r) { return r.view ? std::optional(clones(r.view->inputs)) : std::nullopt; });

  using experiments::Engine;
  py::class_<Engine::Submitted>(m, "ExperimentSubmitted")
      .def_readonly("seq", &Engine::Submitted::seq)
      .def_property_readonly("params", [](const Engine::Submitted& s) { return to_python(s.params); })
      .def_readonly("ignored", &Engine::Submitted::ignored)
      .def_readonly("clamped", &Engine::Submitted::clamped);
  // An experiment's progress or outcome (a copy; its tensors clones).
  using experiments::Result;
  py::class_<Result, std::shared_ptr<Result>>(m, "ExperimentResult")
      .def_readonly("seq", &Result::seq)
      .def_readonly("kind", &Result::kind)
      .def_readonly("layer", &Result::layer)
      .def_property_readonly("params", [](const Result& r) { return to_python(r.params); })
      .def_property_readonly("stage", [](const Result& r) { return std::string(experiments::to_string(r.stage)); })
      .def_property_readonly("done", &Result::finished)
      .def_readonly("step", &Result::step)
      .def_readonly("total", &Result::total)
      .def_readonly("objective", &Result::objective)
      .def_readonly("objectives", &Result::objectives)
      .def_readonly("error", &Result::error)
      .def_readonly("stop_reason", &Result::stop_reason)
      .def_readonly("notes", &Result::notes)
      .def_readonly("seconds", &Result::seconds)
      .def_property_readonly("start", [](const Result& r) { return clone_or_none(r.start); })
      .def_property_readonly("images", [](const Result& r) { return clone_or_none(r.images); })
      .def_readonly("channels", &Result::channels)
      .def_property_readonly("inputs", [](const Result& r) { return clone_or_none(r.inputs); })
      .def_property_readonly("attributions", [](const Result& r) { return clone_or_none(r.attributions); })
      .def_readonly("targets", &Result::targets)
      .def_readonly("target_values", &Result::target_values)
      .def_readonly("attribution_sums", &Result::attribution_sums);
}

}  // namespace nansense::python
