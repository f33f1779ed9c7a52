#include "numerics/checks.h"

#include <algorithm>
#include <cmath>

#include "common/dtype.h"
#include "numerics/bands.h"
#include "numerics/debug_state.h"

namespace nansense::numerics {

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

// Per-layer statistics of named tensors, computed only for layers whose cheap
// sum is suspicious.
void scan(const DebugSettings& s, Table& table, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
          bool gradient, const char* source, std::vector<std::string>& reasons) {
  // Only floating-point (and complex) tensors can hold a NaN or an Inf:
  // masks, token ids, labels and indices pass unchecked.
  std::vector<std::pair<std::string, torch::Tensor>> checked;
  for (const auto& named : tensors) {
    if (named.second.defined() && (named.second.is_floating_point() || named.second.is_complex())) {
      checked.push_back(named);
    }
  }
  std::vector<torch::Tensor> values;
  for (const auto& [_, t] : checked) values.push_back(t);
  if (values.empty()) return;
  const auto sums = abs_sums(values);
  std::vector<std::string> suspects;
  for (size_t i = 0; i < values.size(); ++i) {
    if (suspicious(sums[i], values[i].numel(), values[i].scalar_type(), gradient && s.check_under_over(),
                   s.threshold_fraction())) {
      suspects.push_back(checked[i].first);
    }
  }
  if (suspects.empty()) return;
  std::vector<torch::Tensor> picked;
  std::vector<std::string> owners;
  for (const auto& [layer, t] : checked) {
    if (std::find(suspects.begin(), suspects.end(), layer) == suspects.end()) continue;
    picked.push_back(t);
    owners.push_back(layer);
  }
  const auto stats = band_stats(picked);
  std::map<std::string, BandStats> per_layer;
  std::map<std::string, std::string> dtype;
  std::vector<std::string> order;
  for (size_t i = 0; i < picked.size(); ++i) {
    if (!per_layer.count(owners[i])) order.push_back(owners[i]);
    per_layer[owners[i]] += stats[i];
    if (gradient && !dtype.count(owners[i])) dtype[owners[i]] = common::dtype_name(picked[i].scalar_type());
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
  scan(s, table, in.weight_gradients, /*gradient=*/true, "weight_gradient", reasons);
  auto named = [&](const std::map<std::string, torch::Tensor>* m, const std::set<std::string>& inf_intended) {
    std::vector<std::pair<std::string, torch::Tensor>> v;
    if (!m) return v;
    for (const auto& [layer, t] : *m) {
      if (layer_allowed(s, layer)) continue;
      if (inf_intended.count(layer) && t.is_floating_point()) {
        v.emplace_back(layer, t.masked_fill(t.isinf(), 0));  // a CPU copy of a traced batch
      } else {
        v.emplace_back(layer, t);
      }
    }
    return v;
  };
  if (s.check_nan_inf()) {
    scan(s, table, named(in.activations, in.intended_activations), /*gradient=*/false, "activation", reasons);
    apply_counts(s, table, in.activation_stats, in.intended_activations, "activation", reasons);
  }
  scan(s, table, named(in.activation_gradients, {}), /*gradient=*/true, "activation_gradient", reasons);
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
