// A small program of a user's own, linked against nansense as a package:
// trains a tiny model under a served session and checks what a user relies
// on: the UI's server answers, the layers are found by their names, a
// snapshot holds the optimizer's state, and the loop finishes. Exits 0 when
// all hold; otherwise prints what failed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nansense/nansense.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Tiny : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(4, 8))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(8, 2))};
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
};

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

// GET `path` from the session's server at 127.0.0.1:port; the whole reply.
std::string http_get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\nConnection: close\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return reply;
}

}  // namespace

int main() {
  torch::manual_seed(0);
  Tiny model;
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> data;
  for (int i = 0; i < 3; ++i) data.emplace_back(torch::randn({5, 4}), torch::randint(0, 2, {5}));

  auto session = nansense::start(
      model, nansense::StartOptions().optimizer(&optimizer).port(0).open_browser(false).print_banner(false));
  const std::string url = session.url();
  check(url.rfind("http://127.0.0.1:", 0) == 0, "the UI is served (" + url + ")");
  const int port = std::atoi(url.c_str() + std::string("http://127.0.0.1:").size());

  std::thread training([&] {
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (auto& [x, y] : session.batches(data, "train")) {
        optimizer.zero_grad();
        torch::nll_loss(torch::log_softmax(model.forward(x), 1), y).backward();
        optimizer.step();
      }
    }
    session.close();
  });

  // The first batch pauses, captured.
  check(session.wait_until_stopped(std::chrono::seconds(60)) == nansense::RunState::kPaused, "paused at batch 0");
  const std::string status = http_get(port, "/api/status");
  check(status.rfind("HTTP/1.1 200", 0) == 0 && status.find("\"paused\"") != std::string::npos,
        "GET /api/status answers paused");
  const std::string page = http_get(port, "/");
  check(page.rfind("HTTP/1.1 200", 0) == 0 && page.find("<html") != std::string::npos, "GET / serves the page");
  auto arch = session.architecture();
  std::vector<std::string> names;
  if (arch) {
    for (const auto& layer : arch->layers) names.push_back(layer.name);
  }
  for (const char* want : {"input", "fc1", "relu", "fc2"}) {
    check(std::find(names.begin(), names.end(), want) != names.end(), std::string("layer ") + want + " is found");
  }
  auto snapshot = session.snapshot();
  check(snapshot && snapshot->weights.count("fc1.weight") == 1 && snapshot->optimizer_state.count("fc1.weight") == 1 &&
            snapshot->optimizer_state.at("fc1.weight").count("momentum_buffer") == 1,
        "the snapshot holds fc1.weight and SGD's momentum for it");

  session.detach();
  training.join();
  check(session.state() == nansense::RunState::kFinished, "the loop finished");
  std::printf("%s\n", failures == 0 ? "consumer: all checks passed" : "consumer: checks failed");
  return failures == 0 ? 0 : 1;
}
