// The playground under load: one locked, parked session rebuilt from a frozen
// moment of the demo CNN (trained a few batches on synthetic data), with
// --viewers anonymous viewers polling /api/status and --visitors visitors
// (each a browser: the nansense_visitor cookie the server issued it) running
// experiments, changing their own probes (pin, unpin, eval/train mode,
// perturbations, clear) and trying the refused commands (step, watch,
// settings) for --seconds. Prints /api/status latency (p50, p99, max), how
// many experiments were answered and how many refused, with each distinct
// refusal reason, how many probe changes applied and how many the bound on
// runs in flight refused, and checks that each visitor's probe state stays
// its own (after every change it reads back exactly what it set) and that no
// visitor changed what another sees (the state, scope, watched set, snapshot
// and probe of the shared view stay as they were).
//
// Exits non-zero when a request failed without a reason (a transport error,
// a 5xx, an experiment that neither finished nor was refused, a probe
// change refused for anything but the bound), a visitor read back a probe
// state it did not set, or the shared view changed; the latency figures are printed, never judged (this machine
// is shared and noisy). `--viewers 20 --visitors 4 --seconds 3` is the short
// version the test suite runs (ctest -R playground_load_short).

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "integration/http_client.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using nansense::testing::http_request;

int port_of(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

struct Tally {
  std::mutex mu;
  std::vector<double> status_ms;
  int64_t experiments_answered = 0;
  int64_t experiments_refused = 0;
  int64_t commands_refused = 0;
  int64_t probe_changes = 0;
  int64_t probe_refused = 0;  // by the bound on runs in flight
  int64_t probe_checks = 0;   // read-backs that matched what the visitor set
  std::map<std::string, int64_t> probe_reasons;
  std::map<std::string, int64_t> reasons;
  std::vector<std::string> failures;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// The shared view: what no visitor may change.
json shared_view(int port) {
  const json s = http_request(port, "GET", "/api/status").json();
  return {{"state", s["state"]},
          {"scope", s["stats"]["scope"]},
          {"watched", s["stats"]["watched_layers"]},
          {"sequence", s["snapshot_sequence"]},
          {"probe", s["probe"]},
          {"locked", s["locked"]}};
}

// One visitor: its cookie, and the probe state it set (what it must read back).
struct ProbeVisitor {
  int port = 0;
  std::string cookie;
  bool pinned = false;
  std::string mode = "unchanged";
  std::set<std::pair<int64_t, int64_t>> perturbed;  // [y, x] of sample 0

  nansense::testing::Reply request(const std::string& method, const std::string& target, const std::string& body = "") {
    std::map<std::string, std::string> headers;
    if (!cookie.empty()) headers["Cookie"] = "nansense_visitor=" + cookie;
    auto r = http_request(port, method, target, body, headers);
    if (auto it = r.headers.find("Set-Cookie");
        it != r.headers.end() && it->second.rfind("nansense_visitor=", 0) == 0) {
      cookie = it->second.substr(17, it->second.find(';') - 17);
    }
    return r;
  }
  // "" when /api/probe shows what this visitor set, else what differs.
  std::string check() {
    auto r = request("GET", "/api/probe");
    if (r.status != 200) return "/api/probe answered " + std::to_string(r.status);
    const json p = json::parse(r.body);
    if (p["pinned"] != pinned || p["mode"] != mode || p["perturbations"].size() != perturbed.size()) {
      return "set pinned " + std::string(pinned ? "true" : "false") + ", mode " + mode + ", " +
             std::to_string(perturbed.size()) + " perturbations; read back " + p.dump().substr(0, 300);
    }
    return "";
  }
};

}  // namespace

int main(int argc, char** argv) {
  int viewers = 200, visitors = 20;
  double seconds = 10;
  CLI::App app{"A locked, parked playground session under many viewers and visitors"};
  app.add_option("--viewers", viewers, "Anonymous viewers polling /api/status")->capture_default_str();
  app.add_option("--visitors", visitors, "Visitors running experiments and trying refused commands")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "How long the load runs")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);

  const auto moment = std::filesystem::temp_directory_path() / ("playground_load_" + std::to_string(::getpid()));
  {
    torch::manual_seed(0);
    FashionCnn model;
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
    auto batches = nansense::bench::synthetic_batches(4, 16);
    auto session = nansense::start(model, nansense::StartOptions()
                                              .optimizer(&optimizer)
                                              .epochs(1)
                                              .phases(nansense::PhaseCounts{{"train", 4}})
                                              .stats_scope(nansense::StatsScope::kAll)
                                              .watch({"features.0", "classifier.1"}));
    session.freeze_moment(moment.string(), "train", 0, 3);
    session.detach();
    for (auto& batch : session.batches(batches, "train", 0)) nansense::bench::train_step(model, optimizer, batch);
    session.close();
  }
  FashionCnn model;
  auto session = nansense::load_moment(model, moment.string(),
                                       [model](torch::nn::Module&, const std::vector<torch::Tensor>& item) mutable {
                                         return torch::nll_loss(model->forward(item[0]), item[1]);
                                       });
  std::filesystem::remove(moment);
  session.lock();
  nansense::serve(session, nansense::ServeOptions().port(0).open_browser(false).print_banner(false));
  std::thread parked([&] { session.park(); });
  if (session.wait_until_stopped(std::chrono::seconds(30)) != nansense::RunState::kPaused) {
    std::fprintf(stderr, "the parked session did not pause\n");
    session.close();
    parked.join();
    return 1;
  }
  const int port = port_of(session.url());
  const json before = shared_view(port);

  Tally tally;
  std::atomic<bool> done{false};
  const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  std::vector<std::thread> threads;
  for (int v = 0; v < viewers; ++v) {
    threads.emplace_back([&] {
      std::vector<double> mine;
      while (Clock::now() < until) {
        const auto t0 = Clock::now();
        auto r = http_request(port, "GET", "/api/status");
        mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (r.status != 200) {
          std::lock_guard lock(tally.mu);
          tally.failures.push_back("status " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
        }
      }
      std::lock_guard lock(tally.mu);
      tally.status_ms.insert(tally.status_ms.end(), mine.begin(), mine.end());
    });
  }
  const std::vector<json> experiments = {
      {{"kind", "gradcam"}, {"layer", "features.3"}, {"params", {{"batch", 4}}}},
      {{"kind", "neuron_gradient"}, {"layer", "features.0"}, {"params", {{"channel", 2}, {"batch", 64}}}},
      {{"kind", "deep_dream"}, {"layer", "features.3"}, {"params", {{"steps", 5000}, {"channels", 2}}}},
      {{"kind", "occlusion"}, {"layer", "classifier.1"}, {"params", {{"stride", 1}, {"window", 8}, {"batch", 2}}}},
  };
  const std::vector<std::pair<std::string, json>> refused = {
      {"/api/step", json::object()},
      {"/api/stats/watch", {{"layers", {"features.3"}}}},
      {"/api/stats/scope", {{"scope", "watched"}}},
      {"/api/experiments/cancel", json::object()},
  };
  for (int v = 0; v < visitors; ++v) {
    threads.emplace_back([&, v] {
      std::mt19937 rng(static_cast<unsigned>(v));
      ProbeVisitor me;
      me.port = port;
      me.request("GET", "/api/status");  // the server issues its cookie
      if (me.cookie.size() != 32) {
        std::lock_guard lock(tally.mu);
        tally.failures.push_back("visitor " + std::to_string(v) + " got no visitor cookie");
        return;
      }
      while (Clock::now() < until) {
        json request = experiments[rng() % experiments.size()];
        request["timeout_seconds"] = 120;
        auto r = me.request("POST", "/api/experiments/run", request.dump());
        {
          std::lock_guard lock(tally.mu);
          if (r.status == 200) {
            const auto stage = json::parse(r.body).value("stage", "");
            if (stage == "done" || stage == "stopped") {
              ++tally.experiments_answered;
            } else {
              tally.failures.push_back("experiment ended " + stage + ": " + r.body.substr(0, 300));
            }
          } else if (r.status == 409 || r.status == 400) {
            ++tally.experiments_refused;
            ++tally.reasons[json::parse(r.body).value("error", "(no reason)")];
          } else {
            tally.failures.push_back("experiment answered " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
          }
        }
        // A change of its own probe, then what it reads back.
        ProbeVisitor next = me;
        std::string target;
        json body = {{"timeout_seconds", 30}};
        switch (rng() % 5) {
          case 0:
            target = "/api/probe/pin";
            next.pinned = true;
            break;
          case 1:
            target = me.pinned ? "/api/probe/unpin" : "/api/probe/pin";
            next.pinned = !me.pinned;
            break;
          case 2: {
            static const char* kModes[] = {"eval", "train", "unchanged"};
            next.mode = kModes[rng() % 3];
            target = "/api/probe/mode";
            body["mode"] = next.mode;
            break;
          }
          case 3: {
            const int64_t y = rng() % 28, x = rng() % 28;
            target = "/api/probe/perturb";
            body["index"] = {y, x};
            body["values"] = {static_cast<double>(rng() % 5)};
            next.perturbed.insert({y, x});
            break;
          }
          default:
            target = "/api/probe/clear";
            next.perturbed.clear();
            break;
        }
        auto p = me.request("POST", target, body.dump());
        std::string reason;
        if (p.status == 409 || p.status == 400) reason = json::parse(p.body).value("error", "");
        if (p.status == 200) {
          me.pinned = next.pinned;
          me.mode = next.mode;
          me.perturbed = next.perturbed;
        }
        const std::string differs = me.check();
        std::lock_guard lock(tally.mu);
        if (p.status == 200) {
          ++tally.probe_changes;
        } else if (p.status == 409 && reason.find("too many probe runs in flight") != std::string::npos) {
          ++tally.probe_refused;
          ++tally.probe_reasons[reason.substr(0, reason.find(" ("))];
        } else {
          tally.failures.push_back(target + " answered " + std::to_string(p.status) + ": " + p.body.substr(0, 200));
        }
        if (differs.empty()) {
          ++tally.probe_checks;
        } else {
          tally.failures.push_back("visitor " + std::to_string(v) + "'s probe is not its own: " + differs);
        }
        const auto& [refused_target, refused_body] = refused[rng() % refused.size()];
        auto c = me.request("POST", refused_target, refused_body.dump());
        if (c.status == 409 && json::parse(c.body).value("error", "").find("locked") != std::string::npos) {
          ++tally.commands_refused;
        } else {
          tally.failures.push_back(refused_target + " was not refused as locked: " + std::to_string(c.status) + " " +
                                   c.body.substr(0, 200));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  const json after = shared_view(port);
  session.close();
  parked.join();

  std::printf("viewers %d, visitors %d, %.1f s\n", viewers, visitors, seconds);
  std::printf("/api/status: %zu requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms (target p99 <= 100 ms)\n",
              tally.status_ms.size(), percentile(tally.status_ms, 0.5), percentile(tally.status_ms, 0.99),
              percentile(tally.status_ms, 1.0));
  std::printf("experiments: %lld answered, %lld refused with a reason\n",
              static_cast<long long>(tally.experiments_answered), static_cast<long long>(tally.experiments_refused));
  for (const auto& [reason, n] : tally.reasons)
    std::printf("  refused %lld x: %s\n", static_cast<long long>(n), reason.c_str());
  std::printf("locked commands refused: %lld\n", static_cast<long long>(tally.commands_refused));
  std::printf(
      "probe changes: %lld applied, %lld refused by the bound on runs in flight; %lld read-backs each "
      "visitor's own\n",
      static_cast<long long>(tally.probe_changes), static_cast<long long>(tally.probe_refused),
      static_cast<long long>(tally.probe_checks));
  for (const auto& [reason, n] : tally.probe_reasons)
    std::printf("  probe refused %lld x: %s\n", static_cast<long long>(n), reason.c_str());
  bool ok = tally.failures.empty();
  for (const auto& f : tally.failures) std::printf("FAILED: %s\n", f.c_str());
  if (before != after) {
    ok = false;
    std::printf("FAILED: the shared view changed:\n  before %s\n  after  %s\n", before.dump().c_str(),
                after.dump().c_str());
  } else {
    std::printf("shared view unchanged: %s\n", after.dump().c_str());
  }
  if (tally.probe_changes == 0) {
    ok = false;
    std::printf("FAILED: no probe change was applied\n");
  }
  if (tally.experiments_answered == 0) {
    ok = false;
    std::printf("FAILED: no experiment was answered\n");
  }
  return ok ? 0 : 1;
}
