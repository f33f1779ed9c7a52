// The engine's values as typed Python classes of the native module: each C++
// struct the package reads is bound once, field by field, under its C++ name
// (nansense/*.py turns them into the public dataclasses). No dicts and no
// JSON in between: a field renamed in C++ fails the build or mypy (the stubs
// are generated from these bindings), not a user's script.
//
// Ownership: a value is a copy, or an immutable published view held by its
// shared_ptr; every tensor it hands out is a clone, except the instruments'
// contexts (LayerContext, WeightContext), whose tensors are the training
// device's own by contract (include/nansense/stats.h).
#pragma once

#include <pybind11/pybind11.h>

#include <torch/types.h>

#include <nlohmann/json.hpp>

#include "nansense/schedule.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nansense::python {

namespace py = pybind11;

// A schedule as read at one moment: Session.schedule reads one per access.
struct ScheduleRead {
  std::optional<int64_t> epochs;
  PhaseCounts phases;  // the phases with a known count, in order
  std::vector<std::string> phase_order;
};

// BatchPosition, TrainerStep, ScheduleRead.
void bind_positions(py::module_& m);
// The statistics view (WatchSnapshot and its parts) and the instruments'
// contexts.
void bind_stats(py::module_& m);
// What run control, time travel, probes and experiments report:
// BatchSnapshot, TimeTravelStatus, ProbeResult, ExperimentSubmitted,
// ExperimentResult.
void bind_runs(py::module_& m);

// Clones of a published view's (or a capsule's) tensors, for Python: a
// user's in-place edit must not change what every other reader sees.
std::map<std::string, torch::Tensor> clones(const std::map<std::string, torch::Tensor>& in);
std::map<std::string, std::map<std::string, torch::Tensor>> clones(
    const std::map<std::string, std::map<std::string, torch::Tensor>>& in);
std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& in);

// A JSON value as the Python value json.loads would make of its text
// (non-finite numbers as None), without the text: for the replies that stay
// plain JSON (the controller's, the rank protocol's).
py::object to_python(const nlohmann::json& j);
// The other way: a Python value of JSON's kinds (None, bool, int, float,
// str, list, tuple, dict with str keys) as JSON; raises TypeError for
// anything else.
nlohmann::json json_of(py::handle value);

}  // namespace nansense::python
