#include "experiments/engine.h"

#include <algorithm>
#include <sstream>

#include "observer/observer.h"
#include "state/isolation.h"

namespace nansense::experiments {

namespace {

// A numerical check that trips during backward pauses the loop right there,
// with the batch's op observer still installed: a forward cannot be traced.
const char* kInsideTracedBatch =
    "the loop is paused inside a traced batch (a numerical check stopped it during backward, before the optimizer "
    "step): experiments need a pause between batches; step once, then run the experiment";

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

}  // namespace

Engine::Engine(torch::nn::Module& model, Host host) : model_(model), host_(std::move(host)) {}

void Engine::set_forward(ForwardFn forward) {
  std::lock_guard lock(mu_);
  forward_ = std::move(forward);
}

ForwardFn Engine::forward() const {
  std::lock_guard lock(mu_);
  return forward_;
}

bool Engine::has_forward() const {
  std::lock_guard lock(mu_);
  return static_cast<bool>(forward_);
}

Engine::Checked Engine::check(const std::string& kind_name, const std::string& layer, const json& params) const {
  using Kind = common::Refusal::Kind;
  if (auto ended = host_.ended(); !ended.empty()) throw Refusal(Kind::kConflict, ended);
  const KindSpec* kind = find_kind(kind_name);
  if (!kind) {
    throw Refusal(Kind::kInvalidArgument, "unknown experiment kind \"" + kind_name + "\"; kinds: " + kind_names());
  }
  auto snap = host_.snapshot();
  if (!snap || !snap->architecture) {
    throw Refusal(Kind::kConflict, "no batch has been captured yet: step the loop once, then run the experiment");
  }
  const LayerInfo* info = snap->architecture->find(layer);
  if (!info) {
    std::string usable;
    for (const auto& l : snap->architecture->layers) {
      if (!why_unusable(*kind, l)) usable += (usable.empty() ? "" : ", ") + l.name;
    }
    throw Refusal(
        Kind::kNotFound,
        "unknown layer \"" + layer + "\"; layers " + kind->title + " can use: " + (usable.empty() ? "(none)" : usable),
        "layer");
  }
  if (auto why = why_unusable(*kind, *info)) throw Refusal(Kind::kInvalidArgument, *why);
  if (kind_name == "occlusion") {
    // Windows slide over images: judged from the traced input's shape.
    const auto& inputs = snap->architecture->inputs;
    const LayerInfo* input = inputs.empty() ? nullptr : snap->architecture->find(inputs.front());
    if (input && input->output_shape.size() != 4) {
      std::string shape;
      for (auto d : input->output_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      throw Refusal(Kind::kInvalidArgument,
                    kind->title + " needs image inputs [N,C,H,W]; the model input is [" + shape + "]");
    }
  }
  json session_defaults;
  {
    std::lock_guard lock(mu_);
    if (!forward_) {
      throw Refusal(Kind::kConflict,
                    "the session does not know how to call the model's forward: start() finds it for a "
                    "TORCH_MODULE model whose forward takes one or two tensors; otherwise call session.set_forward()");
    }
    if (defaults_.contains(kind_name)) session_defaults = defaults_[kind_name];
  }
  Checked out;
  out.kind = kind;
  try {
    out.resolved = resolve_params(*kind, {session_defaults, params});
  } catch (const std::invalid_argument& e) {
    throw Refusal(Kind::kInvalidArgument, e.what());
  }
  if (out.resolved.params.contains("channel") && info->output_shape.size() >= 2) {
    const int64_t channel = out.resolved.params["channel"].get<int64_t>();
    const int64_t channels = info->output_shape[1];
    if (channel >= channels) {
      throw Refusal(Kind::kInvalidArgument, kind_name + " parameter \"channel\" is out of range: layer \"" + layer +
                                                "\" has " + std::to_string(channels) + " channels (0.." +
                                                std::to_string(channels - 1) + "; -1 = the whole layer), got " +
                                                std::to_string(channel));
    }
  }
  return out;
}

Engine::Submitted Engine::enqueue(Request request) {
  request.seq = next_seq_++;
  Submitted out;
  out.seq = request.seq;
  out.params = request.params;
  out.queued_ahead = static_cast<int64_t>(queue_.size()) + (running_ ? 1 : 0);
  auto r = std::make_shared<Result>();
  r->seq = request.seq;
  r->kind = request.kind;
  r->layer = request.layer;
  r->params = request.params;
  r->tab = request.tab;
  results_[r->seq] = std::move(r);
  mark_changed(request.seq);
  queue_.push_back(std::move(request));
  return out;
}

Result Engine::result_of(const Request& request, Result::Stage stage) {
  Result r;
  r.seq = request.seq;
  r.kind = request.kind;
  r.layer = request.layer;
  r.params = request.params;
  r.tab = request.tab;
  r.stage = stage;
  return r;
}

Result Engine::stopped_before_running(const Request& request, std::string why) {
  Result r = result_of(request, Result::Stage::kStopped);
  r.stop_reason = std::move(why);
  return r;
}

std::vector<Result> Engine::drop_queued_of(const std::string& tab) {
  std::vector<Result> dropped;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->tab != tab) {
      ++it;
      continue;
    }
    dropped.push_back(stopped_before_running(*it, "replaced by a newer run of the same auto experiment before it ran"));
    it = queue_.erase(it);
  }
  return dropped;
}

Engine::Submitted Engine::submit(const std::string& kind_name, const std::string& layer, const json& params,
                                 bool until_pause) {
  using Kind = common::Refusal::Kind;
  Checked checked = check(kind_name, layer, params);
  std::vector<std::string> clamped;
  if (locked()) {
    for (const auto& c : kLockedLimits) {
      auto& p = checked.resolved.params;
      if (!p.contains(c.key) || !p[c.key].is_number()) continue;
      const double v = p[c.key].get<double>();
      if (c.upper ? v > c.bound : v < c.bound) {
        p[c.key] = p[c.key].is_number_integer() ? json(static_cast<int64_t>(c.bound)) : json(c.bound);
        clamped.push_back(c.key);
      }
    }
  }
  const bool paused = host_.paused();
  if (paused && host_.in_batch_pause && host_.in_batch_pause()) throw Refusal(Kind::kConflict, kInsideTracedBatch);
  Submitted out;
  {
    std::lock_guard lock(mu_);
    if (closed_) throw Refusal(Kind::kConflict, "the session has closed: experiments run on a live training loop");
    if (!paused && !auto_run_ && !until_pause) {
      throw Refusal(Kind::kConflict,
                    "training is running: pause it (pause or step) before running an experiment, or turn on "
                    "auto-run (set_auto_run_experiments) to run it at the next live update");
    }
    if (locked_ && queue_.size() >= kLockedQueue) {
      throw Refusal(Kind::kConflict, "this shared session already has " + std::to_string(queue_.size()) +
                                         " experiments waiting (at most " + std::to_string(kLockedQueue) +
                                         "): try again when one has finished");
    }
    out = enqueue(Request{0, kind_name, layer, checked.resolved.params, ""});
  }
  out.ignored = checked.resolved.ignored;
  out.clamped = std::move(clamped);
  cv_.notify_all();
  if (host_.changed) host_.changed();
  if (paused) {
    try {
      host_.post([this] { drain(); });
    } catch (const std::exception&) {
      // The loop ended meanwhile: close() reports the queued request.
    }
  }
  return out;
}

Engine::Submitted Engine::set_auto(const std::string& tab, const std::string& kind_name, const std::string& layer,
                                   const json& params, Clock::time_point now, bool pinned) {
  using Kind = common::Refusal::Kind;
  if (tab.empty())
    throw Refusal(Kind::kInvalidArgument, "an auto experiment needs a tab: a name for the page that renews it");
  Checked checked = check(kind_name, layer, params);
  // Paused between batches: a new or changed experiment shows at once.
  const bool paused = host_.paused() && !(host_.in_batch_pause && host_.in_batch_pause());
  Submitted out;
  std::vector<Result> dropped;
  {
    std::lock_guard lock(mu_);
    if (closed_) throw Refusal(Kind::kConflict, "the session has closed: experiments run on a live training loop");
    auto_runs_.expire(now);
    const bool changed = auto_runs_.put(tab, kind_name, layer, params, now, pinned);
    if (changed && paused) {
      dropped = drop_queued_of(tab);
      out = enqueue(Request{0, kind_name, layer, checked.resolved.params, tab});
    } else {
      out.params = checked.resolved.params;
    }
  }
  out.ignored = checked.resolved.ignored;
  for (const auto& r : dropped) publish(r);
  if (out.seq != 0) {
    cv_.notify_all();
    if (host_.changed) host_.changed();
    try {
      host_.post([this] { drain(); });
    } catch (const std::exception&) {
      // The loop ended meanwhile: close() reports the queued request.
    }
  }
  return out;
}

bool Engine::clear_auto(const std::string& tab) {
  std::lock_guard lock(mu_);
  return auto_runs_.remove(tab);
}

std::vector<AutoRuns::Entry> Engine::auto_entries(Clock::time_point now) {
  std::lock_guard lock(mu_);
  auto_runs_.expire(now);
  return auto_runs_.entries();
}

bool Engine::runs_at_updates() const {
  std::lock_guard lock(mu_);
  return auto_run_ || auto_runs_.any_pinned();
}

std::shared_ptr<const Result> Engine::latest_finished(const std::function<bool(const Result&)>& which) const {
  std::lock_guard lock(mu_);
  for (auto it = results_.rbegin(); it != results_.rend(); ++it) {
    if (it->second->finished() && which(*it->second)) return it->second;
  }
  return nullptr;
}

int Engine::snapshot_published(Clock::time_point now) {
  std::vector<AutoRuns::Entry> entries;
  {
    std::lock_guard lock(mu_);
    auto_runs_.expire(now);
    if (closed_) return 0;
    for (const auto& e : auto_runs_.entries()) {
      if (auto_run_ || e.pinned) entries.push_back(e);
    }
    if (entries.empty()) return 0;
  }
  int queued = 0;
  std::vector<Result> published;
  for (const auto& e : entries) {
    Result failed;
    try {
      // Checked again: the architecture or the session defaults may have changed.
      Checked checked = check(e.kind, e.layer, e.params);
      std::lock_guard lock(mu_);
      auto dropped = drop_queued_of(e.tab);
      published.insert(published.end(), dropped.begin(), dropped.end());
      enqueue(Request{0, e.kind, e.layer, checked.resolved.params, e.tab});
      ++queued;
      continue;
    } catch (const common::Refusal& refusal) {
      failed.error = refusal.what();
    }
    std::lock_guard lock(mu_);
    failed.seq = next_seq_++;
    failed.kind = e.kind;
    failed.layer = e.layer;
    failed.params = e.params;
    failed.tab = e.tab;
    failed.stage = Result::Stage::kFailed;
    published.push_back(std::move(failed));
  }
  for (const auto& r : published) publish(r);
  if (queued > 0) {
    cv_.notify_all();
    if (host_.changed) host_.changed();
  }
  return queued;
}

Engine::Changes Engine::changes_since(uint64_t version) const {
  std::lock_guard lock(mu_);
  Changes out;
  out.version = version_;
  if (version_ == version) return out;
  for (const auto& [seq, r] : results_) {
    auto at = changed_at_.find(seq);
    const bool changed = at != changed_at_.end() && at->second > version;
    if (changed || r->stage == Result::Stage::kQueued) out.results.push_back(r);
  }
  return out;
}

int Engine::cancel(std::optional<uint64_t> seq) {
  int stopped = 0;
  std::vector<Result> dropped;
  {
    std::lock_guard lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (seq && it->seq != *seq) {
        ++it;
        continue;
      }
      dropped.push_back(stopped_before_running(*it, "cancelled before it ran"));
      it = queue_.erase(it);
      ++stopped;
    }
    // The running request, unless its final result is already out (its
    // caller may have it; the drain has yet to let go of it).
    if (running_ && (!seq || *seq == *running_)) {
      auto published = results_.find(*running_);
      const bool final = published != results_.end() && published->second->stage != Result::Stage::kQueued &&
                         published->second->stage != Result::Stage::kRunning;
      if (!final) {
        cancelled_[*running_] = true;
        ++stopped;
      }
    }
  }
  for (const auto& r : dropped) publish(r);
  return stopped;
}

std::shared_ptr<const Result> Engine::result(uint64_t seq) const {
  std::lock_guard lock(mu_);
  auto it = results_.find(seq);
  return it == results_.end() ? nullptr : it->second;
}

std::optional<int64_t> Engine::queued_ahead(uint64_t seq) const {
  std::lock_guard lock(mu_);
  if (running_ == seq) return 0;
  int64_t ahead = running_ ? 1 : 0;
  for (const auto& r : queue_) {
    if (r.seq == seq) return ahead;
    ++ahead;
  }
  return std::nullopt;
}

std::shared_ptr<const Result> Engine::wait(uint64_t seq, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    auto it = results_.find(seq);
    return it == results_.end() || it->second->finished();
  });
  auto it = results_.find(seq);
  return it == results_.end() ? nullptr : it->second;
}

uint64_t Engine::latest_seq() const {
  std::lock_guard lock(mu_);
  return next_seq_ - 1;
}

std::vector<uint64_t> Engine::kept() const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& [seq, r] : results_) out.push_back(seq);
  return out;
}

bool Engine::auto_run() const {
  std::lock_guard lock(mu_);
  return auto_run_;
}

void Engine::set_auto_run(bool on) {
  {
    std::lock_guard lock(mu_);
    auto_run_ = on;
  }
  if (host_.changed) host_.changed();
}

json Engine::defaults() const {
  std::lock_guard lock(mu_);
  return defaults_;
}

std::vector<std::string> Engine::set_defaults(const std::string& kind_name, const json& params) {
  const KindSpec* kind = find_kind(kind_name);
  if (!kind) {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "unknown experiment kind \"" + kind_name + "\"; kinds: " + kind_names());
  }
  if (!params.is_null() && !params.is_object()) {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "defaults for " + kind_name + " must be an object of parameter values");
  }
  Resolved resolved;
  try {
    resolved = resolve_params(*kind, {params});
  } catch (const std::invalid_argument& e) {
    throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
  }
  json kept = json::object();
  if (params.is_object()) {
    for (const auto& [key, value] : params.items()) {
      if (std::find(resolved.ignored.begin(), resolved.ignored.end(), key) == resolved.ignored.end()) {
        kept[key] = resolved.params[key];
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    if (kept.empty()) {
      defaults_.erase(kind_name);
    } else {
      defaults_[kind_name] = std::move(kept);
    }
  }
  if (host_.changed) host_.changed();
  return resolved.ignored;
}

void Engine::lock() {
  std::lock_guard lock(mu_);
  locked_ = true;
  auto_run_ = false;
  time_limit_ = std::min(time_limit_, kLockedTimeLimit);
}

bool Engine::locked() const {
  std::lock_guard lock(mu_);
  return locked_;
}

double Engine::time_limit_seconds() const {
  std::lock_guard lock(mu_);
  return time_limit_;
}

void Engine::set_time_limit_seconds(double seconds) {
  std::lock_guard lock(mu_);
  time_limit_ = seconds;
}

bool Engine::pending() const {
  std::lock_guard lock(mu_);
  return !queue_.empty();
}

void Engine::drain() {
  while (true) {
    if (host_.leave_requested && host_.leave_requested()) return;
    Request request;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty() || closed_) return;
      request = std::move(queue_.front());
      queue_.pop_front();
      running_ = request.seq;
    }
    run_one(request);
    {
      std::lock_guard lock(mu_);
      running_.reset();
      cancelled_.erase(request.seq);
      keep_recent();
    }
    cv_.notify_all();
  }
}

void Engine::close() {
  std::vector<Result> dropped;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (const auto& q : queue_) dropped.push_back(stopped_before_running(q, "the session closed before it ran"));
    queue_.clear();
  }
  for (const auto& r : dropped) publish(r);
}

void Engine::publish(const Result& r) {
  {
    std::lock_guard lock(mu_);
    results_[r.seq] = std::make_shared<const Result>(r);
    mark_changed(r.seq);
    keep_recent();
  }
  cv_.notify_all();
  if (host_.changed) host_.changed();
}

void Engine::mark_changed(uint64_t seq) { changed_at_[seq] = ++version_; }

void Engine::keep_recent() {
  // Finished results beyond the 8 newest go; queued and running ones stay.
  size_t finished = 0;
  for (auto it = results_.rbegin(); it != results_.rend();) {
    if (it->second->finished() && ++finished > (locked_ ? kLockedKeptResults : kKeptResults)) {
      changed_at_.erase(it->first);
      it = std::make_reverse_iterator(results_.erase(std::next(it).base()));
    } else {
      ++it;
    }
  }
}

void Engine::run_one(const Request& request) {
  const auto began = std::chrono::steady_clock::now();
  Result r = result_of(request, Result::Stage::kRunning);
  publish(r);
  double limit = 0;
  Context ctx;
  {
    std::lock_guard lock(mu_);
    ctx.forward = forward_;
    limit = time_limit_;
  }
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(); };
  ctx.model = &model_;
  ctx.seed = request.seq;
  ctx.should_stop = [&]() -> std::optional<std::string> {
    {
      std::lock_guard lock(mu_);
      if (cancelled_.count(request.seq)) return "cancelled";
    }
    if (elapsed() > limit) return "time limit (" + seconds_text(limit) + " s) reached";
    if (host_.leave_requested && host_.leave_requested()) return "training resumed, jumped or ended";
    return std::nullopt;
  };
  ctx.progress = [&](const Result& progress) {
    Result copy = progress;
    copy.seconds = elapsed();
    publish(copy);
  };
  try {
    const KindSpec* kind = find_kind(request.kind);
    if (!kind) throw std::invalid_argument("unknown experiment kind \"" + request.kind + "\"");
    if (observer::Observer::active()) throw std::runtime_error(kInsideTracedBatch);
    auto snap = host_.snapshot();
    if (!snap) throw std::runtime_error("no captured batch");
    const torch::Device device = state::device_of(model_);
    for (const auto& t : snap->inputs) ctx.inputs.push_back(t.to(device));
    if (snap->trimmed()) {
      r.notes.push_back("the snapshot kept " + std::to_string(snap->samples_kept) + " of the batch's " +
                        std::to_string(snap->batch_size) + " samples");
    }
    if (host_.display) {
      const ServeOptions display = host_.display();
      const std::string input = snap->architecture && !snap->architecture->inputs.empty()
                                    ? snap->architecture->inputs.front()
                                    : std::string("input");
      ctx.mean = display.input_mean().for_input(input);
      ctx.std = display.input_std().for_input(input);
    }
    state::ModelIsolation isolation(model_);
    run(*kind, request.layer, request.params, ctx, r);
  } catch (const std::exception& e) {
    r.stage = Result::Stage::kFailed;
    r.error = e.what();
  } catch (...) {
    r.stage = Result::Stage::kFailed;
    r.error = "the experiment failed";
  }
  r.seconds = elapsed();
  publish(r);
}

}  // namespace nansense::experiments
