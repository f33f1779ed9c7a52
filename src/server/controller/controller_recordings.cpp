// Recordings and snapshots of the pages' views (recorder.h): each view drawn
// as one page of the pictures the pages and MCP show, with the training
// position stamped over it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "record/files.h"
#include "render/downscale.h"
#include "server/controller/controller.h"
#include "server/controller/recorder.h"
#include "experiments/engine.h"
#include "session/session_port.h"
#include "state/atomic_file.h"

namespace nansense::server {

namespace {

constexpr std::chrono::milliseconds kPumpInterval{500};
// How long start_recording waits, paused, for an experiment view's first run.
constexpr std::chrono::seconds kFirstExperimentWait{30};

// What an experiment view shows: its recording's newest run, else the
// newest finished run of the same kind on the layer (a page's, an agent's).
// A run stopped before it ran (a newer update replaced it) has no picture.
bool drawable(const experiments::Result& r) { return r.stage != experiments::Result::Stage::kStopped || r.step > 0; }

std::shared_ptr<const experiments::Result> recorded_result(const detail::LabPort& lab, const RecordView& v) {
  if (v.seq) return lab.experiment_result(*v.seq);
  const std::string tab = v.tab();
  if (auto own =
          lab.latest_finished_experiment([&](const experiments::Result& r) { return r.tab == tab && drawable(r); })) {
    return own;
  }
  return lab.latest_finished_experiment(
      [&](const experiments::Result& r) { return r.kind == v.kind && r.layer == v.layer && drawable(r); });
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Refusal unknown_view(const std::string& view) {
  return Refusal(Refusal::Kind::kInvalidArgument,
                 "unknown view \"" + view + "\": one of layers, weights, histograms, patches, experiment", "view");
}

RecordingFile file_reply(const record::RecordingInfo& info) {
  return {info.path, info.frames, info.dropped, info.width, info.height, info.error, info.finished};
}

}  // namespace

std::string RecordView::key() const {
  if (view == "layers") return "main";
  if (view == "weights") return "weights:" + layer;
  if (view == "histograms") return "watch_histogram";
  if (view == "patches") return "watch_minmax";
  if (view == "experiment") return "experiment:" + layer;
  throw unknown_view(view);
}

std::string RecordView::label() const {
  if (view == "layers") return "Layers: " + joined(layers);
  if (view == "weights") return "Weights: " + layer;
  if (view == "histograms") return "Histograms: " + joined(layers) + (phase ? " (" + *phase + ")" : "");
  if (view == "patches") return "Min/Max patches: " + layer + (phase ? " (" + *phase + ")" : "");
  if (view == "experiment") return "Experiment: " + kind + " of " + layer;
  throw unknown_view(view);
}

// --- what a recording fixes ---

std::string FixedSetting::message() const { return FixedByRecording::message(what, key, label, why); }

std::vector<FixedSetting> fixed_by(const RecordView& v) {
  std::vector<FixedSetting> out;
  auto add = [&](const std::string& setting, const std::string& what, const std::string& why) {
    out.push_back({setting, what, why, v.key(), v.label()});
  };
  add("update_frequency", "the update frequency",
      "each live update is a frame of the video, so the cadence is its time scale");
  if (v.view == "histograms") {
    add("stats_scope", "the statistics scope",
        "a new scope changes which layers collect the histograms it shows (watched drops the others', none "
        "stops them)");
    add("watch_performance", "the statistics detail (watch_performance)",
        "a change flushes the histograms collected so far");
    for (const auto& layer : v.layers) {
      add("watched:" + layer, "watching " + layer, "unwatching it drops the histograms of it the video shows");
    }
  } else if (v.view == "patches") {
    add("stats_scope", "the statistics scope",
        "a new scope changes which layers collect the patches it shows (watched drops the others', none stops "
        "them)");
    add("watch_performance", "the statistics detail (watch_performance)",
        "a change flushes the Min/Max patches collected so far (or turns them off)");
    add("watched:" + v.layer, "watching " + v.layer,
        "its Min/Max patches are collected while it is watched (without a set_patch_layers list)");
    add("patch_layers:" + v.layer, "the Min/Max patches of " + v.layer,
        "a patch-layer list without it stops the patches the video shows");
  }
  return out;
}

// --- drawing a view ---

ViewPages RecordingArea::draw_view(const RecordView& v) const {
  ViewPages out;
  const auto snap = session_.snapshot();
  if (snap) {
    out.position = snap->position;
    out.sequence = snap->sequence;
  }
  std::vector<record::Panel> panels;
  auto page = [&](const std::string& suffix, const std::vector<record::Panel>& content) {
    const std::string stamp = v.label() + (suffix.empty() ? "" : " (" + suffix + ")") + "  ·  " +
                              (snap ? out.position.to_string() : std::string("before the first capture"));
    out.pages.emplace_back(suffix, record::compose(stamp, content));
  };
  if (v.view == "layers") {
    if (v.layers.empty()) throw Refusal(Refusal::Kind::kInvalidArgument, "view layers needs layers", "layers");
    std::vector<std::string> kinds;
    if (v.kind != "gradient") kinds.push_back("activation");
    if (v.kind != "activation") kinds.push_back("gradient");
    std::string reasons;
    bool any = false;
    for (const auto& layer : v.layers) {
      for (const auto& k : kinds) {
        try {
          const auto strip = owner_.views().render_strip(layer, k, v.strip);
          panels.push_back({layer + " " + k, render::decode_png(strip->png)});
          out.position = strip->position;
          out.sequence = strip->sequence;
          any = true;
        } catch (const Refusal& e) {
          panels.push_back({layer + " " + k + ": " + e.what(), {}});
          reasons += (reasons.empty() ? "" : "; ") + std::string(e.what());
        }
      }
    }
    if (!any) throw Refusal(Refusal::Kind::kInvalidArgument, "nothing to record: " + reasons, "layers");
    page("", panels);
  } else if (v.view == "weights") {
    const auto drawn = owner_.weights().render_weights(v.layer, {}, {});
    for (const auto& w : drawn.pictures) {
      panels.push_back({w->parameter + " " + w->tensor, render::decode_png(w->png)});
      out.position = w->position;
      out.sequence = w->sequence;
    }
    for (const auto& m : drawn.missing) panels.push_back({m.parameter + " " + m.tensor + ": " + m.reason, {}});
    if (drawn.pictures.empty()) {
      throw Refusal(Refusal::Kind::kInvalidArgument, "layer \"" + v.layer + "\" has no parameter tensor to draw",
                    "layer");
    }
    page("", panels);
  } else if (v.view == "histograms") {
    if (v.layers.empty()) throw Refusal(Refusal::Kind::kInvalidArgument, "view histograms needs layers", "layers");
    StatsArea::HistogramOptions o;
    o.layers = v.layers;
    o.phase = v.phase;
    o.log_x = v.log_x;
    o.log_y = v.log_y;
    o.channel = v.channel;
    const auto chart = owner_.stats().render_histogram(o);
    page("", {{joined(chart->series), render::decode_png(chart->png)}});
  } else if (v.view == "patches") {
    if (v.layer.empty()) throw Refusal(Refusal::Kind::kInvalidArgument, "view patches needs a layer", "layer");
    PatchArea::PatchOptions o;
    o.layer = v.layer;
    o.phase = v.phase;
    o.heatmap = v.heatmap;
    o.grids = {"max_pixel", "min_pixel"};
    const auto pixel = owner_.patches().render_extreme_patches(o);
    page("pixel", {{pixel->caption, render::decode_png(pixel->png)}});
    // The average rankings exist only with average_patches on.
    o.grids = {"max_average", "min_average"};
    try {
      const auto average = owner_.patches().render_extreme_patches(o);
      page("average", {{average->caption, render::decode_png(average->png)}});
    } catch (const Refusal&) {
    }
  } else if (v.view == "experiment") {
    const auto result = recorded_result(session_, v);
    if (!result) {
      throw Refusal(Refusal::Kind::kConflict,
                    "no " + v.kind + " of \"" + v.layer +
                        "\" has finished yet: a recording runs it at every live update (at once when paused)",
                    "layer");
    }
    const auto picture = owner_.experiments().render_experiment(result->seq, v.overlay);
    page("", {{picture->caption, render::decode_png(picture->png)}});
    out.sequence = result->seq;
  } else {
    throw unknown_view(v.view);
  }
  return out;
}

uint64_t RecordingArea::view_sequence(const RecordView& v) const {
  if (v.view != "experiment") return owner_.snapshot_sequence();
  const auto result = recorded_result(session_, v);
  return result ? result->seq : 0;
}

void RecordingArea::pin_experiment(const RecordView& v) {
  detail::LabPort& lab = session_;
  const auto sub = lab.set_auto_experiment(v.tab(), v.kind, v.layer, v.params, true);
  // Paused, it runs at once: its result is the first frame.
  if (sub.seq != 0) lab.wait_for_experiment(sub.seq, kFirstExperimentWait);
}

void RecordingArea::release_experiment(const RecordView& v) { session_.clear_auto_experiment(v.tab()); }

void RecordingArea::settle_experiment(const RecordView& v) {
  // Only a pause runs it now: a running loop's next update, or a loop that
  // ended, would keep Save & Finish waiting.
  if (session_.state() != RunState::kPaused) return;
  detail::LabPort& lab = session_;
  const std::string tab = v.tab();
  std::shared_ptr<const experiments::Result> newest;
  for (const auto seq : lab.kept_experiments()) {
    const auto r = lab.experiment_result(seq);
    if (r && r->tab == tab && (!newest || r->seq > newest->seq)) newest = r;
  }
  if (newest && !newest->finished()) lab.wait_for_experiment(newest->seq, kFirstExperimentWait);
}

// --- the controller's commands ---

RecordingArea::RecordingArea(Controller& owner, detail::SessionPort& session)
    : owner_(owner), session_(session), recorder_(std::make_unique<Recorder>(owner)) {}

RecordingArea::~RecordingArea() { recorder_->finish_all(); }

Recordings RecordingArea::list_recordings() const { return recorder_->list(); }

std::shared_ptr<const RecordingArea::RecordedFile> RecordingArea::get_recording_file(const std::string& path) const {
  const auto saved = recorder_->saved_file(path);
  if (!saved) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "\"" + path + "\" is not a saved recording of this run (list_recordings names them under saved)",
                  "path");
  }
  if (!*saved) {
    throw Refusal(Refusal::Kind::kConflict,
                  "\"" + path + "\" is still being recorded: Save & Finish it first (stop_recording)", "path");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Refusal(Refusal::Kind::kNotFound, "\"" + path + "\" was saved but cannot be read now", "path");
  auto out = std::make_shared<RecordedFile>();
  out->path = path;
  out->name = std::filesystem::path(path).filename().string();
  out->content_type = "video/mp4";
  out->bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return out;
}
Recording RecordingArea::start_recording(const RecordView& view) { return recorder_->start(view); }
RecordingsStopped RecordingArea::stop_recording(const std::optional<std::string>& key) { return recorder_->stop(key); }
RecordingsDiscarded RecordingArea::discard_recording(const std::optional<std::string>& key) {
  return recorder_->discard(key);
}
SnapshotSaved RecordingArea::save_snapshot(const RecordView& view) {
  if (view.view != "experiment" || (!view.seq && !view.kind.empty())) return recorder_->snapshot(view);
  // The form of the original NaNsense 0.4.0 (Python, on PyPI): an already
  // published result, by seq or the newest.
  detail::LabPort& lab = session_;
  std::shared_ptr<const experiments::Result> result;
  if (view.seq) {
    result = lab.experiment_result(*view.seq);
  } else {
    for (const auto seq : lab.kept_experiments()) {
      const auto r = lab.experiment_result(seq);
      if (r && drawable(*r) && (!result || r->seq > result->seq)) result = r;
    }
  }
  if (!result) {
    throw Refusal(Refusal::Kind::kNotFound,
                  view.seq ? "no experiment " + std::to_string(*view.seq) + " is kept (the 8 most recent are)"
                           : std::string("no experiment result to save: run_experiment publishes one"),
                  "seq");
  }
  RecordView resolved = view;
  resolved.seq = result->seq;
  resolved.layer = result->layer;
  resolved.kind = result->kind;
  return recorder_->snapshot(resolved);
}
void RecordingArea::finish_recordings() { recorder_->finish_all(); }
std::vector<std::string> RecordingArea::recording_keys() const { return recorder_->keys(); }

std::map<std::string, std::string> RecordingArea::fixed_settings() const {
  std::map<std::string, std::string> out;
  for (const auto& [setting, f] : recorder_->fixed()) out[setting] = f.message();
  return out;
}

void RecordingArea::refuse_if_fixed(const std::string& command, const std::string& setting,
                                    const std::string& argument) const {
  const auto fixed = recorder_->fixed();
  if (auto it = fixed.find(setting); it != fixed.end()) {
    const FixedSetting& f = it->second;
    throw FixedByRecording(command, f.what, f.key, f.label, f.why, argument);
  }
}

// --- Deep Dream clips ---

ExperimentResult RecordingArea::run_experiment_video(const std::string& kind, const std::string& layer,
                                                     const json& params, Wait wait) {
  if (kind != "deep_dream") {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "video is for deep_dream only: " + kind + " draws one picture, not a sequence", "video");
  }
  if (wait.count() <= 0) {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "video needs timeout_seconds > 0: its frames are drawn while the dream runs", "timeout_seconds");
  }
  detail::LabPort& lab = session_;
  const auto sub = lab.submit_experiment(kind, layer, params);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  // A clip keeps every step it is given: a queue as long as the dream's
  // published steps (about 20) rather than a live recording's 8.
  std::unique_ptr<record::Recording> clip;
  int64_t drawn_step = -1;
  uint64_t seen = 0;
  std::string draw_error;
  while (true) {
    const auto r = lab.experiment_result(sub.seq);
    if (!r) break;
    const bool over = r->stage == experiments::Result::Stage::kDone ||
                      r->stage == experiments::Result::Stage::kStopped ||
                      r->stage == experiments::Result::Stage::kFailed;
    if (r->stage != experiments::Result::Stage::kQueued && r->step != drawn_step) {
      try {
        const auto picture = owner_.experiments().render_experiment(sub.seq, false);
        if (!clip) {
          const std::string stem = "deep_dream_" + record::file_part(layer) + "_seq" + std::to_string(sub.seq);
          clip = std::make_unique<record::Recording>(record::free_path(recorder_->folder(), stem, "mp4"),
                                                     record::Recording::kFps, 1024);
        }
        const std::string stamp = "Deep Dream of " + layer + "  ·  step " + std::to_string(picture->step) + " of " +
                                  std::to_string(picture->total);
        clip->push(record::compose(stamp, {{picture->caption, render::decode_png(picture->png)}}));
        drawn_step = r->step;
      } catch (const Refusal& e) {
        draw_error = e.what();  // nothing drawable at this step yet
      } catch (const std::runtime_error& e) {
        draw_error = e.what();
        break;
      }
    }
    if (over || std::chrono::steady_clock::now() >= deadline) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    seen = owner_.run_control().wait_for_change(seen, std::min(left, std::chrono::milliseconds(200)));
  }
  ExperimentResult out = owner_.experiments().request_result(sub.seq, kind, layer, sub.params, Wait{0});
  out.ignored_params = sub.ignored;
  if (!sub.clamped.empty()) out.clamped_params = sub.clamped;
  if (clip) {
    const auto info = clip->finish();
    out.video = ExperimentVideo{info.path, info.frames, info.error};
  } else {
    out.video = ExperimentVideo{std::nullopt, 0, draw_error.empty() ? "no step was drawn" : draw_error};
  }
  return out;
}

// --- the recorder ---

Recorder::Recorder(Controller& controller) : controller_(controller), started_(std::time(nullptr)) {}

Recorder::~Recorder() { finish_all(); }

std::string Recorder::folder() const { return record::run_folder(started_); }

std::vector<std::string> Recorder::keys() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, a] : active_) out.push_back(key);
  return out;
}

std::map<std::string, FixedSetting> Recorder::fixed() const {
  std::lock_guard lock(mu_);
  std::map<std::string, FixedSetting> out;
  for (const auto& [key, a] : active_) {
    for (auto& f : fixed_by(a->view)) out.emplace(f.setting, std::move(f));
  }
  return out;
}

Recording Recorder::describe(const Active& a) const {
  Recording out{a.key, a.view.label(), a.view.view, 0, 0, {}, a.draw_error};
  for (size_t i = 0; i < a.files.size(); ++i) {
    const auto info = a.files[i].second->info();
    out.files.push_back(file_reply(info));
    if (i == 0) out.frames = info.frames;
    out.dropped += info.dropped;
    if (out.error.empty()) out.error = info.error;
  }
  return out;
}

std::optional<bool> Recorder::saved_file(const std::string& path) const {
  std::vector<std::shared_ptr<Active>> active;
  {
    std::lock_guard lock(mu_);
    for (const auto& entry : saved_) {
      if (std::find(entry.files.begin(), entry.files.end(), path) != entry.files.end()) return true;
    }
    for (const auto& [key, a] : active_) active.push_back(a);
  }
  for (const auto& a : active) {
    for (const auto& [suffix, recording] : a->files) {
      if (recording->info().path == path) return false;
    }
  }
  return std::nullopt;
}

Recordings Recorder::list() const {
  std::vector<std::shared_ptr<Active>> active;
  Recordings out{folder(), record::Recording::kFps, {}, {}};
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, a] : active_) active.push_back(a);
    out.saved = saved_;
  }
  for (const auto& a : active) out.recordings.push_back(describe(*a));
  return out;
}

void Recorder::add_frame(Active& a, const ViewPages& pages) {
  // The files are the first frame's pages, named by where it was drawn.
  if (a.files.empty()) {
    const std::string stem =
        record::snapshot_stem(a.key, pages.position.epoch, pages.position.phase, pages.position.batch_idx);
    for (const auto& [suffix, image] : pages.pages) {
      a.files.emplace_back(suffix, std::make_unique<record::Recording>(record::free_path(
                                       folder(), stem + (suffix.empty() ? "" : "_" + suffix), "mp4")));
    }
  }
  a.last_sequence = pages.sequence;
  for (auto& [suffix, recording] : a.files) {
    for (const auto& [page_suffix, image] : pages.pages) {
      if (page_suffix == suffix) recording->push(image);
    }
  }
}

Recording Recorder::start(const RecordView& view) {
  const std::string key = view.key();
  {
    std::lock_guard lock(mu_);
    if (active_.count(key)) {
      throw Refusal(Refusal::Kind::kConflict,
                    "\"" + key + "\" is already recording: stop_recording or discard_recording it first", "view");
    }
  }
  const bool experiment = view.view == "experiment";
  // Its own auto experiment, pinned (not drawn under draw_mu_: paused, the
  // first run is waited for).
  if (experiment) controller_.recordings().pin_experiment(view);
  auto a = std::make_shared<Active>();
  a->view = view;
  a->key = key;
  try {
    std::lock_guard draw(draw_mu_);
    std::optional<ViewPages> pages;
    try {
      pages = controller_.recordings().draw_view(view);
    } catch (const Refusal& e) {
      // An experiment not run yet (a running loop runs it at the next live
      // update): the files start with its first result.
      if (!experiment) throw;
      a->draw_error = std::string("waiting for the first run: ") + e.what();
    }
    if (pages) {
      try {
        add_frame(*a, *pages);
      } catch (const std::runtime_error& e) {
        throw Refusal(Refusal::Kind::kConflict, e.what());
      }
    }
    std::lock_guard lock(mu_);
    if (active_.count(key)) {
      for (auto& f : a->files) f.second->discard();
      throw Refusal(Refusal::Kind::kConflict, "\"" + key + "\" is already recording", "view");
    }
    active_[key] = a;
    if (!thread_.joinable()) {
      stopping_ = false;
      thread_ = std::thread([this] { pump(); });
    }
  } catch (...) {
    if (experiment) controller_.recordings().release_experiment(view);
    throw;
  }
  controller_.run_control().wake_watchers();  // the status's recordings changed
  return describe(*a);
}

std::vector<std::shared_ptr<Recorder::Active>> Recorder::take(const std::optional<std::string>& key) {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Active>> out;
  if (key) {
    auto it = active_.find(*key);
    if (it == active_.end()) {
      std::vector<std::string> keys;
      for (const auto& [k, a] : active_) keys.push_back(k);
      throw Refusal(Refusal::Kind::kNotFound,
                    "no recording \"" + *key + "\"; recording now: " + (keys.empty() ? "none" : joined(keys)), "key");
    }
    out.push_back(it->second);
    active_.erase(it);
  } else {
    for (auto& [k, a] : active_) out.push_back(a);
    active_.clear();
  }
  return out;
}

RecordingsStopped Recorder::stop(const std::optional<std::string>& key, bool settle) {
  if (settle) {
    // An experiment's run still going (a step's) is the view as it is now.
    std::vector<RecordView> experiments;
    {
      std::lock_guard lock(mu_);
      for (const auto& [k, a] : active_) {
        if (a->view.view == "experiment" && (!key || *key == k)) experiments.push_back(a->view);
      }
    }
    for (const auto& v : experiments) controller_.recordings().settle_experiment(v);
  }
  std::lock_guard draw(draw_mu_);
  const auto taken = take(key);
  // files: every saved file's path, as the original NaNsense 0.4.0's
  // stop_recording lists them.
  RecordingsStopped out{{}, {}, folder(), std::nullopt};
  for (const auto& a : taken) {
    if (a->view.view == "experiment") controller_.recordings().release_experiment(a->view);
    // Save & Finish keeps the view as it is now: an update the pump had not
    // drawn yet becomes the last frame.
    if (controller_.recordings().view_sequence(a->view) != a->last_sequence) {
      try {
        add_frame(*a, controller_.recordings().draw_view(a->view));
      } catch (const std::exception& e) {
        a->draw_error = std::string("last frame not drawn: ") + e.what();
      }
    }
    std::vector<std::string> paths;
    std::string error = a->draw_error;
    for (auto& [suffix, recording] : a->files) {
      const auto info = recording->finish();
      if (info.frames > 0) {
        paths.push_back(info.path);
        out.files.push_back(info.path);
      }
      if (error.empty()) error = info.error;
    }
    Recording entry = describe(*a);
    entry.error = error;
    {
      std::lock_guard lock(mu_);
      saved_.push_back({a->key, a->view.label(), paths});
    }
    out.stopped.push_back(std::move(entry));
  }
  if (!taken.empty()) controller_.run_control().wake_watchers();
  if (taken.empty()) out.note = "nothing was recording";
  return out;
}

RecordingsDiscarded Recorder::discard(const std::optional<std::string>& key) {
  std::lock_guard draw(draw_mu_);
  const auto taken = take(key);
  RecordingsDiscarded out;
  for (const auto& a : taken) {
    if (a->view.view == "experiment") controller_.recordings().release_experiment(a->view);
    DiscardedRecording entry{a->key, {}};
    for (auto& [suffix, recording] : a->files) {
      recording->discard();
      entry.removed.push_back(recording->info().path);
    }
    out.discarded.push_back(std::move(entry));
  }
  if (!taken.empty()) controller_.run_control().wake_watchers();
  if (taken.empty()) out.note = "nothing was recording";
  return out;
}

SnapshotSaved Recorder::snapshot(const RecordView& view) {
  const std::string key = view.key();
  const ViewPages pages = controller_.recordings().draw_view(view);
  SnapshotSaved out{{}, key, to_json(pages.position), pages.sequence};
  const std::string stem =
      record::snapshot_stem(key, pages.position.epoch, pages.position.phase, pages.position.batch_idx);
  for (const auto& [suffix, image] : pages.pages) {
    try {
      const std::string path = record::free_path(folder(), stem + (suffix.empty() ? "" : "_" + suffix), "png");
      // Whole or not at all: the reserved name is replaced atomically.
      try {
        state::write_file_atomic(path, {render::encode_png(image)});
      } catch (const std::exception& e) {
        std::error_code ec;
        std::filesystem::remove(path, ec);
        throw std::runtime_error(e.what());
      }
      out.files.push_back(path);
    } catch (const std::runtime_error& e) {
      throw Refusal(Refusal::Kind::kConflict, e.what());
    }
  }
  return out;
}

void Recorder::pump() {
  record::yield_to_training();
  uint64_t seen = 0;
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    seen = controller_.run_control().wait_for_change(seen, kPumpInterval);
    std::lock_guard draw(draw_mu_);
    std::vector<std::shared_ptr<Active>> active;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      for (const auto& [key, a] : active_) active.push_back(a);
    }
    for (const auto& a : active) {
      const uint64_t sequence = controller_.recordings().view_sequence(a->view);
      if (sequence == a->last_sequence) continue;
      try {
        add_frame(*a, controller_.recordings().draw_view(a->view));
        a->draw_error.clear();
      } catch (const std::exception& e) {
        // Shown in the dialog; the next update tries again.
        a->last_sequence = sequence;
        a->draw_error = std::string("frame not drawn at ") +
                        (a->view.view == "experiment" ? "experiment " : "snapshot ") + std::to_string(sequence) + ": " +
                        e.what();
      }
    }
  }
}

void Recorder::finish_all() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  controller_.run_control().wake_watchers();
  if (thread_.joinable()) thread_.join();
  stop(std::nullopt, false);
  std::lock_guard lock(mu_);
  stopping_ = false;
}

}  // namespace nansense::server
