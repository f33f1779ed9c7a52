#include "numerics/checks.h"

#include <algorithm>
#include <cmath>

#include <c10/util/Exception.h>

#include "common/dtype.h"
#include "numerics/bands.h"
#include "numerics/debug_state.h"

namespace nansense::numerics {

namespace {

// What went wrong, for the report and the banner: torch's own message
// without the C++ backtrace c10::Error appends to what().
std::string error_text(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace

namespace {

struct Row {
  LayerReport report;
  bool tripped = false;
};

class Table {
 public:
  Row& row(const std::string& layer) {
    auto it = index_.find(layer);
    if (it != index_.end()) return rows_[it->second];
    index_[layer] = rows_.size();
    Row row;
    row.report.layer = layer;
    rows_.push_back(std::move(row));
    return rows_.back();
  }
  std::vector<Row>& rows() { return rows_; }

 private:
  std::map<std::string, size_t> index_;
  std::vector<Row> rows_;
};

void add_source(LayerReport& r, const char* source) {
  if (std::find(r.sources.begin(), r.sources.end(), source) == r.sources.end()) r.sources.push_back(source);
}

// Fills a row from one tensor group's statistics; returns the reasons it trips.
void apply(const DebugSettings& s, Row& row, const BandStats& st, bool gradient, const char* source,
           std::vector<std::string>& reasons) {
  auto trip = [&](const char* reason) {
    row.tripped = true;
    add_source(row.report, source);
    if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) reasons.push_back(reason);
  };
  if (s.check_nan_inf()) {
    row.report.nan = std::max(row.report.nan, st.nan_fraction());
    row.report.inf = std::max(row.report.inf, st.inf_fraction());
    if (st.nan > 0) trip("nan");
    if (st.inf > 0) trip("inf");
  }
  if (gradient && s.check_under_over()) {
    row.report.underflow = std::max(row.report.underflow, st.underflow_fraction());
    row.report.overflow = std::max(row.report.overflow, st.overflow_fraction());
    if (st.underflow_fraction() >= s.threshold_fraction()) trip("underflow");
    if (st.overflow_fraction() >= s.threshold_fraction()) trip("overflow");
  }
}

// One tensor offered to a check: its layer (the table's row) and its name.
struct Named {
  std::string layer;
  std::string tensor;
  torch::Tensor value;
};

std::vector<std::string> categories_of(const DebugSettings& s, bool gradient) {
  std::vector<std::string> out;
  if (s.check_nan_inf()) out.push_back(kNanInf);
  if (gradient && s.check_under_over()) out.push_back(kUnderOver);
  return out;
}

// band_stats tensor by tensor when the batched call throws; a tensor whose
// own statistics throw gets nullopt and its error.
std::vector<std::optional<BandStats>> band_stats_each(const std::vector<torch::Tensor>& tensors,
                                                      std::vector<std::string>& errors) {
  errors.assign(tensors.size(), "");
  std::vector<std::optional<BandStats>> out(tensors.size());
  try {
    auto all = band_stats(tensors);
    for (size_t i = 0; i < all.size(); ++i) out[i] = all[i];
    return out;
  } catch (const std::exception&) {
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    try {
      out[i] = band_stats({tensors[i]}).at(0);
    } catch (const std::exception& e) {
      errors[i] = error_text(e);
    }
  }
  return out;
}

// Per-layer statistics of named tensors, computed only for layers whose cheap
// sum is suspicious. A tensor whose statistics throw is left out and listed
// in `failed`; the others are checked as if it were not there.
void scan(const DebugSettings& s, Table& table, const std::vector<Named>& tensors, bool gradient, const char* source,
          std::vector<std::string>& reasons, const std::set<std::string>& unchecked,
          std::vector<UncheckedTensor>& failed, const KnownAbsSums* known = nullptr) {
  // Only floating-point (and complex) tensors can hold a NaN or an Inf:
  // masks, token ids, labels and indices pass unchecked.
  std::vector<const Named*> checked;
  for (const auto& named : tensors) {
    if (named.value.defined() && (named.value.is_floating_point() || named.value.is_complex()) &&
        !unchecked.count(unchecked_key(source, named.tensor))) {
      checked.push_back(&named);
    }
  }
  auto fail = [&](const Named& n, const std::string& error) {
    failed.push_back({source, n.tensor, n.layer, categories_of(s, gradient), error, {}});
  };
  std::vector<torch::Tensor> values;
  for (const auto* n : checked) values.push_back(n->value);
  if (values.empty()) return;
  std::vector<std::string> errors;
  const auto sums = abs_sums_each(values, &errors, known);
  std::set<std::string> suspects;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!sums[i]) {
      fail(*checked[i], errors[i]);
      continue;
    }
    if (suspicious(*sums[i], values[i].numel(), values[i].scalar_type(), gradient && s.check_under_over(),
                   s.threshold_fraction())) {
      suspects.insert(checked[i]->layer);
    }
  }
  if (suspects.empty()) return;
  // Every readable tensor of a suspect layer: its fractions are the layer's.
  std::vector<const Named*> picked;
  for (size_t i = 0; i < values.size(); ++i) {
    if (sums[i] && suspects.count(checked[i]->layer)) picked.push_back(checked[i]);
  }
  std::vector<torch::Tensor> picked_values;
  for (const auto* n : picked) picked_values.push_back(n->value);
  const auto stats = band_stats_each(picked_values, errors);
  std::map<std::string, BandStats> per_layer;
  std::map<std::string, std::string> dtype;
  std::vector<std::string> order;
  for (size_t i = 0; i < picked.size(); ++i) {
    if (!stats[i]) {
      fail(*picked[i], errors[i]);
      continue;
    }
    const auto& owner = picked[i]->layer;
    if (!per_layer.count(owner)) order.push_back(owner);
    per_layer[owner] += *stats[i];
    if (gradient && !dtype.count(owner)) dtype[owner] = common::dtype_name(picked_values[i].scalar_type());
  }
  for (const auto& layer : order) {
    Row& row = table.row(layer);
    if (gradient && !row.report.dtype && dtype.count(layer)) row.report.dtype = dtype[layer];
    apply(s, row, per_layer[layer], gradient, source, reasons);
  }
}

// The NaN and Inf counts of whole batches whose copies the snapshot budget
// trimmed (their subnormal and overflow bands are judged on the kept samples).
void apply_counts(const DebugSettings& s, Table& table, const std::map<std::string, TensorStats>* stats,
                  const std::set<std::string>& inf_intended, const char* source, std::vector<std::string>& reasons) {
  if (!stats) return;
  for (const auto& [layer, st] : *stats) {
    if (layer_allowed(s, layer)) continue;
    BandStats counts;
    counts.numel = static_cast<double>(st.numel);
    counts.nan = static_cast<double>(st.nan);
    if (!inf_intended.count(layer)) counts.inf = static_cast<double>(st.pos_inf + st.neg_inf);
    if (counts.nan == 0 && counts.inf == 0) continue;
    // Counts only: the bands' fractions stay those of the kept samples.
    apply(s, table.row(layer), counts, /*gradient=*/false, source, reasons);
  }
}

}  // namespace

std::string unchecked_key(const std::string& source, const std::string& tensor) { return source + ":" + tensor; }

std::vector<std::optional<double>> abs_sums_each(const std::vector<torch::Tensor>& tensors,
                                                 std::vector<std::string>* errors, const KnownAbsSums* known) {
  if (errors) errors->assign(tensors.size(), "");
  std::vector<std::optional<double>> out(tensors.size());
  std::vector<torch::Tensor> rest;
  std::vector<size_t> where;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (known) {
      if (auto it = known->find(tensors[i].unsafeGetTensorImpl()); it != known->end()) {
        out[i] = it->second;
        continue;
      }
    }
    rest.push_back(tensors[i]);
    where.push_back(i);
  }
  if (rest.empty()) return out;
  try {
    auto all = abs_sums(rest);
    for (size_t j = 0; j < all.size(); ++j) out[where[j]] = all[j];
    return out;
  } catch (const std::exception&) {
  }
  for (size_t j = 0; j < rest.size(); ++j) {
    try {
      out[where[j]] = abs_sums({rest[j]}).at(0);
    } catch (const std::exception& e) {
      if (errors) (*errors)[where[j]] = error_text(e);
    }
  }
  return out;
}

bool layer_allowed(const DebugSettings& settings, const std::string& layer) {
  for (const auto& entry : settings.allow()) {
    if (layer == entry || layer.rfind(entry + ".", 0) == 0) return true;
  }
  return false;
}

std::string layer_of_parameter(const std::string& parameter,
                               const std::map<std::string, std::string>& architecture_owner) {
  if (auto it = architecture_owner.find(parameter); it != architecture_owner.end()) return it->second;
  auto dot = parameter.rfind('.');
  return dot == std::string::npos ? parameter : parameter.substr(0, dot);
}

CheckResult run_checks(const DebugSettings& s, const CheckInput& in) {
  CheckResult out;
  if (!s.any_check()) return out;
  if (s.check_nan_inf()) out.checks_used.push_back(kNanInf);
  if (s.check_under_over()) out.checks_used.push_back(kUnderOver);
  Table table;
  std::vector<std::string> reasons;
  std::vector<Named> weight_gradients;
  for (size_t i = 0; i < in.weight_gradients.size(); ++i) {
    const auto& [layer, g] = in.weight_gradients[i];
    weight_gradients.push_back({layer, i < in.weight_gradient_names.size() ? in.weight_gradient_names[i] : layer, g});
  }
  scan(s, table, weight_gradients, /*gradient=*/true, "weight_gradient", reasons, in.unchecked, out.failed);
  auto named = [&](const std::map<std::string, torch::Tensor>* m, const std::set<std::string>& inf_intended,
                   const char* source) {
    std::vector<Named> v;
    if (!m) return v;
    for (const auto& [layer, t] : *m) {
      if (layer_allowed(s, layer)) continue;
      if (inf_intended.count(layer) && t.is_floating_point() && !in.unchecked.count(unchecked_key(source, layer))) {
        // Only activations have intended infinities, and they are tested for
        // NaN and Inf alone: read in place, a copy holding no NaN has nothing
        // to find once its infinities are cleared, so none is made.
        if (const auto kinds = non_finite_kinds_in_place(t); kinds && !kinds->nan) continue;
        try {
          v.push_back({layer, layer, t.masked_fill(t.isinf(), 0)});  // a CPU copy of a traced batch
        } catch (const std::exception& e) {
          out.failed.push_back({source, layer, layer, categories_of(s, false), error_text(e), {}});
        }
      } else {
        v.push_back({layer, layer, t});
      }
    }
    return v;
  };
  if (s.check_nan_inf()) {
    scan(s, table, named(in.activations, in.intended_activations, "activation"), /*gradient=*/false, "activation",
         reasons, in.unchecked, out.failed, in.known_abs_sums);
    apply_counts(s, table, in.activation_stats, in.intended_activations, "activation", reasons);
  }
  scan(s, table, named(in.activation_gradients, {}, "activation_gradient"), /*gradient=*/true, "activation_gradient",
       reasons, in.unchecked, out.failed, in.known_abs_sums);
  apply_counts(s, table, in.activation_gradient_stats, {}, "activation_gradient", reasons);

  for (const auto* r : {"nan", "inf", "underflow", "overflow"}) {
    if (std::find(reasons.begin(), reasons.end(), r) != reasons.end()) out.reasons.push_back(r);
  }
  auto rank = [&](const std::string& layer) {
    auto it = std::find(in.layer_order.begin(), in.layer_order.end(), layer);
    return it - in.layer_order.begin();
  };
  std::vector<Row> rows;
  for (auto& row : table.rows()) {
    if (row.tripped) rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const Row& a, const Row& b) { return rank(a.report.layer) < rank(b.report.layer); });
  for (auto& row : rows) out.layers.push_back(std::move(row.report));
  return out;
}

}  // namespace nansense::numerics
