// What one active recording costs a training run: the demo's CNN on
// synthetic batches, served, running attached at the default live-update
// cadence (a snapshot every 2 seconds of training), timed from Run to the
// pause at the last batch, with and without a recording of the main page's
// strips of every layer. The two alternate within the same run (the machine
// is noisy; absolute times are not comparable between runs) and the ratio of
// their medians is printed; the target is <= 1.05. The recording's frames are
// drawn and encoded on the server's threads, so wall time is what counts.
#include <CLI/CLI.hpp>
#include <nansense/nansense.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "bench_common.h"
#include "integration/http_client.h"

namespace {

using nansense::bench::Batch;
using json = nlohmann::json;

struct Pass {
  double ms = 0;
  double cpu_ms = 0;  // the training thread's own CPU time over the whole loop
  int64_t frames = 0;
  int64_t dropped = 0;
};

int port_of(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

Pass one_pass(const std::vector<Batch>& batches, bool record) {
  torch::manual_seed(0);
  FashionCnn model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto session =
      nansense::start(model, nansense::StartOptions()
                                 .epochs(1)
                                 .phases(nansense::PhaseCounts{{"train", static_cast<int64_t>(batches.size())}})
                                 .optimizer(&optimizer));
  if (!nansense::serve(session, nansense::ServeOptions().port(0).open_browser(false).print_banner(false))) {
    throw std::runtime_error("could not serve");
  }
  const int port = port_of(session.url());
  Pass pass;
  std::thread driver([&] {
    if (session.wait_until_stopped(std::chrono::seconds(120)) != nansense::RunState::kPaused) return;
    std::vector<std::string> layers;
    const json architecture = json::parse(nansense::testing::http_request(port, "GET", "/api/architecture").body);
    for (const auto& l : architecture["layers"]) {
      if (l["role"] != "input") layers.push_back(l["name"]);
    }
    if (record) {
      const auto started = nansense::testing::http_request(port, "POST", "/api/recordings/start",
                                                           json{{"view", "layers"}, {"layers", layers}}.dump());
      if (started.status != 200) std::fprintf(stderr, "start_recording: %s\n", started.body.c_str());
    }
    const auto t0 = std::chrono::steady_clock::now();
    nansense::testing::http_request(port, "POST", "/api/run", json{{"timeout_seconds", 0}}.dump());
    // Run pauses at the run's last batch.
    while (session.wait_until_stopped(std::chrono::seconds(120)) == nansense::RunState::kRunning) {
    }
    pass.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (record) {
      const json stopped =
          json::parse(nansense::testing::http_request(port, "POST", "/api/recordings/stop", "{}").body);
      for (const auto& r : stopped["stopped"]) {
        pass.frames += r["frames"].get<int64_t>();
        pass.dropped += r["dropped"].get<int64_t>();
      }
    }
    try {
      session.detach();  // out of the pause at the last batch
    } catch (const nansense::ControlError&) {
      // The run finished without one (its length unknown until the end).
    }
  });
  const double cpu0 = nansense::bench::thread_cpu_ms();
  for (const auto& batch : session.batches(batches, "train")) nansense::bench::train_step(model, optimizer, batch);
  pass.cpu_ms = nansense::bench::thread_cpu_ms() - cpu0;
  session.close();
  driver.join();
  return pass;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What one active recording costs a served training run at the default update cadence."};
  int64_t batch_count = 300;
  int passes = 5;
  app.add_option("--batches", batch_count, "Batches per timed pass (default 300)")->check(CLI::Range(20, 100000));
  app.add_option("--passes", passes, "Passes of each variant, alternating (default 5)")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  const auto dir = std::filesystem::temp_directory_path() / ("nansense_bench_recording_" + std::to_string(getpid()));
  setenv("NANSENSE_RECORDINGS_DIR", dir.c_str(), 1);
  const auto batches = nansense::bench::synthetic_batches(batch_count, 64);
  std::printf("torch threads: 1; %lld batches of 64 per pass, %d passes each, alternating\n",
              static_cast<long long>(batch_count), passes);
  std::vector<double> plain, recorded, plain_cpu, recorded_cpu;
  int64_t frames = 0, dropped = 0;
  for (int i = 0; i < passes; ++i) {
    const Pass p = one_pass(batches, false);
    plain.push_back(p.ms);
    plain_cpu.push_back(p.cpu_ms);
    const Pass r = one_pass(batches, true);
    recorded.push_back(r.ms);
    recorded_cpu.push_back(r.cpu_ms);
    frames += r.frames;
    dropped += r.dropped;
  }
  std::filesystem::remove_all(dir);
  const double p = median(plain), r = median(recorded);
  std::printf("served, no recording:        %8.1f ms a pass (median)\n", p);
  std::printf("served, recording every layer: %6.1f ms a pass (median), %.1f frames and %.1f dropped a pass\n", r,
              double(frames) / passes, double(dropped) / passes);
  std::printf("ratio recording / none: %.3f wall (target <= 1.05); %.3f of the training thread's CPU time\n", r / p,
              median(recorded_cpu) / median(plain_cpu));
  return 0;
}
