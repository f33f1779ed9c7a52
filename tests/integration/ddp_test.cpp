// A C++ program's distributed run debugged as one: examples/ddp started as 2
// and 4 real processes on loopback (rank 0 hosts the store and serves the
// UI), driven over rank 0's REST API. Each rank writes the epoch and batch
// its loop body runs to a file; the test waits on those files and on rank
// 0's status, with deadlines, never on sleeps.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/http_client.h"

extern char** environ;

namespace {

using nansense::testing::http_request;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int kBatches = 6;    // per epoch, on every rank
constexpr int kBatchSize = 8;  // per rank
constexpr int kHidden = 32;    // fc1's width in examples/ddp

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Polls `ready` until it holds or `deadline` passes (then false): for state
// another process changes (a file, a REST status).
bool eventually(const std::function<bool()>& ready, std::chrono::seconds deadline = std::chrono::seconds(30)) {
  const auto end = Clock::now() + deadline;
  while (!ready()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// One rank: a child process with its stdin on a pipe (--keep-serving lasts
// until it closes) and its output in files. Killed at the end if still alive.
class Rank {
 public:
  Rank(int rank, int world, int store_port, const std::vector<std::string>& args, const fs::path& dir,
       const std::vector<std::string>& extra_env)
      : out_(dir / ("rank_" + std::to_string(rank) + ".out")), err_(dir / ("rank_" + std::to_string(rank) + ".err")) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("RANK=" + std::to_string(rank));
    env.push_back("WORLD_SIZE=" + std::to_string(world));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(store_port));
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<std::string> argv{NANSENSE_DDP_EXAMPLE};
    argv.insert(argv.end(), args.begin(), args.end());
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[0], 0);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    auto c_strings = [](std::vector<std::string>& v) {
      std::vector<char*> out;
      for (auto& s : v) out.push_back(s.data());
      out.push_back(nullptr);
      return out;
    };
    auto argv_c = c_strings(argv);
    auto env_c = c_strings(env);
    const int rc = posix_spawn(&pid_, argv_c[0], &actions, nullptr, argv_c.data(), env_c.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_fds[0]);
    stdin_ = pipe_fds[1];
    if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + " failed: " + std::to_string(rc));
  }
  ~Rank() {
    close_stdin();
    if (!status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  void close_stdin() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }
  void kill_now() { ::kill(pid_, SIGKILL); }
  // The exit code once it exited (-signal when killed), nullopt while it runs.
  std::optional<int> exited() {
    if (status_) return status_;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    return status_;
  }
  std::optional<int> wait_exit(std::chrono::seconds deadline) {
    eventually([&] { return exited().has_value(); }, deadline);
    return exited();
  }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(err_); }

 private:
  fs::path out_, err_;
  pid_t pid_ = 0;
  int stdin_ = -1;
  std::optional<int> status_;
};

class DdpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = fs::temp_directory_path() / ("nansense_ddp_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    ranks_.clear();  // kills what is left
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Starts `world` ranks of examples/ddp: rank 0 first (it hosts the store,
  // on a free port it writes down), then the others. `args(r)`: rank r's
  // extra arguments.
  void launch(int world, const std::function<std::vector<std::string>(int)>& args = {},
              std::vector<std::string> env = {}) {
    world_ = world;
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> a{"--epochs",       "2",
                                 "--batches",      std::to_string(kBatches),
                                 "--batch-size",   std::to_string(kBatchSize),
                                 "--port",         "0",
                                 "--progress-dir", dir_.string(),
                                 "--capsule-dir",  (dir_ / "capsules").string()};
      if (r == 0) {
        a.insert(a.end(), {"--url-file", (dir_ / "url").string(), "--store-port-file", (dir_ / "store_port").string()});
      }
      const std::vector<std::string> more = args ? args(r) : std::vector<std::string>{};
      a.insert(a.end(), more.begin(), more.end());
      // The checkpoints' folder, unless the rank's own arguments name one.
      if (std::find(more.begin(), more.end(), "--cache-dir") == more.end()) {
        a.insert(a.end(), {"--cache-dir", (dir_ / "cache").string()});
      }
      if (r == 1) {
        // The others connect to the port rank 0's store bound.
        ASSERT_TRUE(eventually([&] { return fs::exists(dir_ / "store_port"); })) << ranks_[0]->err();
        store_port_ = std::stoi(read_file(dir_ / "store_port"));
      }
      ranks_.push_back(std::make_unique<Rank>(r, world, r == 0 ? 0 : store_port_, a, dir_, env));
    }
  }
  // Rank 0's UI port, once it serves (after every rank started).
  int ui_port() {
    if (port_ == 0) {
      EXPECT_TRUE(eventually([&] { return fs::exists(dir_ / "url"); })) << ranks_[0]->err();
      const std::string url = read_file(dir_ / "url");
      const auto colon = url.rfind(':');
      port_ = std::stoi(url.substr(colon + 1));
    }
    return port_;
  }
  json get(const std::string& target) { return http_request(ui_port(), "GET", target).json(); }
  json post(const std::string& target, const json& body) {
    return http_request(ui_port(), "POST", target, body.dump()).json();
  }
  json wait_state(const std::string& state, std::chrono::seconds deadline = std::chrono::seconds(30)) {
    json status;
    eventually(
        [&] {
          status = get("/api/status");
          return status["state"] == state;
        },
        deadline);
    return status;
  }
  // What rank r's loop body runs: "<epoch> <batch>", "done" or "error".
  std::string progress(int r) { return read_file(dir_ / ("rank_" + std::to_string(r) + ".txt")); }
  // Every rank's body stands at (epoch, batch): rank 0 is paused there, and
  // the others wait at the next batch's boundary (not inside the next batch).
  void expect_all_at(int64_t epoch, int64_t batch) {
    const std::string want = std::to_string(epoch) + " " + std::to_string(batch);
    for (int r = 0; r < world_; ++r) {
      EXPECT_TRUE(eventually([&] { return progress(r) == want; }, std::chrono::seconds(20)))
          << "rank " << r << " is at \"" << progress(r) << "\", rank 0 is paused at " << want;
    }
  }
  void expect_paused_at(const json& status, int64_t epoch, int64_t batch) {
    ASSERT_EQ(status["state"], "paused") << status.dump();
    EXPECT_EQ(status["live_position"]["epoch"], epoch) << status.dump();
    EXPECT_EQ(status["live_position"]["batch_idx"], batch) << status.dump();
  }

  fs::path dir_;
  int world_ = 0;
  int store_port_ = 0;
  int port_ = 0;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

class DdpWorldTest : public DdpTest, public ::testing::WithParamInterface<int> {};

// (a) Rank 0's pause holds every rank at the same batch; a step moves them
// all by one; run finishes every rank.
TEST_P(DdpWorldTest, PauseStepAndRunApplyToEveryRank) {
  const int world = GetParam();
  launch(world);
  // The first batch pauses (the session's initial mode steps batch by batch).
  json status = wait_state("paused");
  expect_paused_at(status, 0, 0);
  expect_all_at(0, 0);
  status = post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}});
  expect_paused_at(status, 0, 1);
  expect_all_at(0, 1);
  status = post("/api/step", {{"unit", "epoch"}, {"timeout_seconds", 20}});
  expect_paused_at(status, 1, 0);
  expect_all_at(1, 0);
  post("/api/run", {{"detach", true}});
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(ranks_[r]->wait_exit(std::chrono::seconds(30)), 0) << "rank " << r << ": " << ranks_[r]->err();
    EXPECT_EQ(progress(r), "done");
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpWorldTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "_ranks"; });

// A time-travel jump requested on rank 0 rewinds every rank: each restores
// its own checkpoint (<cache_dir>/rank_<r>) and all stand at the target
// epoch's first batch; the run then finishes on every rank.
TEST_F(DdpTest, JumpRewindsEveryRank) {
  launch(2);
  expect_paused_at(wait_state("paused"), 0, 0);
  json status = post("/api/step", {{"unit", "epoch"}, {"timeout_seconds", 20}});
  expect_paused_at(status, 1, 0);
  expect_all_at(1, 0);
  status = post("/api/time_travel", {{"epoch", 0}, {"timeout_seconds", 20}});
  expect_paused_at(wait_state("paused"), 0, 0);
  EXPECT_EQ(get("/api/time_travel")["jumps"], 1);
  expect_all_at(0, 0);
  EXPECT_TRUE(fs::is_directory(dir_ / "cache" / "rank_1")) << "rank 1 checkpoints to its own folder";
  post("/api/run", {{"detach", true}});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks_[r]->wait_exit(std::chrono::seconds(30)), 0) << "rank " << r << ": " << ranks_[r]->err();
    EXPECT_EQ(progress(r), "done");
  }
}

// A jump to an epoch one rank has no checkpoint of is refused for every
// rank, naming it; the run stays where it was and finishes.
TEST_F(DdpTest, JumpToAnEpochARankLacksIsRefusedForAll) {
  // Rank 1 cannot write its checkpoints (training goes on without them).
  launch(2, [](int r) {
    return r == 1 ? std::vector<std::string>{"--cache-dir", "/proc/nansense-no-such-dir"} : std::vector<std::string>{};
  });
  expect_paused_at(wait_state("paused"), 0, 0);
  expect_paused_at(post("/api/step", {{"unit", "epoch"}, {"timeout_seconds", 20}}), 1, 0);
  const auto reply = http_request(ui_port(), "POST", "/api/time_travel", json{{"epoch", 0}}.dump());
  EXPECT_GE(reply.status, 400u) << reply.body;
  EXPECT_NE(reply.body.find("rank 1 has no checkpoint of epoch 0"), std::string::npos) << reply.body;
  EXPECT_NE(reply.body.find("the jump is refused for all"), std::string::npos) << reply.body;
  expect_paused_at(get("/api/status"), 1, 0);
  expect_all_at(1, 0);
  post("/api/run", {{"detach", true}});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks_[r]->wait_exit(std::chrono::seconds(30)), 0) << "rank " << r << ": " << ranks_[r]->err();
  }
}

// (b) A NaN on rank 1 only: rank 0 pauses every rank at that batch, its
// debug report names rank 1, and rank 1 wrote its capsule in its own folder.
TEST_F(DdpTest, NanOnOneRankPausesEveryRankAndNamesIt) {
  constexpr int kNanBatch = 3;
  launch(2, [](int r) {
    return r == 1 ? std::vector<std::string>{"--nan-rank", "1", "--nan-batch", std::to_string(kNanBatch)}
                  : std::vector<std::string>{};
  });
  expect_paused_at(wait_state("paused"), 0, 0);
  post("/api/run", {{"detach", false}});
  json status;
  ASSERT_TRUE(eventually([&] {
    status = get("/api/status");
    return status["state"] == "paused" && status["live_position"]["batch_idx"] != 0;
  })) << status.dump();
  expect_paused_at(status, 0, kNanBatch);
  expect_all_at(0, kNanBatch);
  json debug;
  EXPECT_TRUE(eventually([&] {
    debug = get("/api/debug");
    return debug.dump().find("rank 1") != std::string::npos;
  })) << debug.dump();
  const std::string summary = debug.dump();
  EXPECT_NE(summary.find("The checks tripped on rank"), std::string::npos) << summary;
  EXPECT_NE(summary.find("rank_1"), std::string::npos) << "the note names rank 1's capsule: " << summary;
  const fs::path capsules = dir_ / "capsules" / "rank_1";
  ASSERT_TRUE(fs::is_directory(capsules)) << summary;
  EXPECT_FALSE(fs::is_empty(capsules));
}

// (c) The statistics rank 0 shows add up every rank's shard: counts are the
// sum over ranks (each rank collects what rank 0 collects: only rank 0 was
// started with scope all).
TEST_F(DdpTest, StatisticsAddUpEveryRanksShard) {
  launch(2, [](int r) {
    return r == 0 ? std::vector<std::string>{"--stats-scope", "all", "--keep-serving"} : std::vector<std::string>{};
  });
  expect_paused_at(wait_state("paused"), 0, 0);
  post("/api/run", {{"detach", true}});
  EXPECT_EQ(ranks_[1]->wait_exit(std::chrono::seconds(30)), 0) << ranks_[1]->err();
  json status = wait_state("finished");
  EXPECT_EQ(status["stats"]["ranks"], 2) << status.dump();
  json history = get("/api/stats/history?layer=fc1&phase=train");
  ASSERT_EQ(history["phases"]["train"].size(), 2u) << history.dump().substr(0, 2000);
  for (const auto& epoch : history["phases"]["train"]) {
    // fc1's activation: batches x samples x width values on each rank.
    EXPECT_EQ(epoch["activation"]["n"], 2 * kBatches * kBatchSize * kHidden) << "epoch " << epoch["epoch"];
  }
  ranks_[0]->close_stdin();
  EXPECT_EQ(ranks_[0]->wait_exit(std::chrono::seconds(20)), 0) << ranks_[0]->err();
}

// (d) A follower killed while rank 0 is paused: rank 0's UI reports the lost
// rank within NANSENSE_DDP_TIMEOUT (here 3 s) and its loop ends with an error
// naming the rank.
TEST_F(DdpTest, KilledFollowerIsReportedWithinTheTimeout) {
  launch(2, [](int r) { return r == 0 ? std::vector<std::string>{"--keep-serving"} : std::vector<std::string>{}; },
         {"NANSENSE_DDP_TIMEOUT=3"});
  expect_paused_at(wait_state("paused"), 0, 0);
  expect_all_at(0, 0);
  ranks_[1]->kill_now();
  const auto killed = Clock::now();
  json status = wait_state("lost", std::chrono::seconds(20));
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  ASSERT_EQ(status["state"], "lost") << status.dump();
  const std::string reason = status["lost_reason"];
  EXPECT_NE(reason.find("rank 1 of 2 stopped answering"), std::string::npos) << reason;
  EXPECT_GE(seconds, 2.5);
  EXPECT_LT(seconds, 10.0) << "rank 0 took " << seconds << " s to notice";
  std::cout << "rank 0 reported the killed rank after " << seconds << " s (NANSENSE_DDP_TIMEOUT=3)\n";
  EXPECT_TRUE(eventually([&] { return progress(0) == "error"; }));
  ranks_[0]->close_stdin();
  EXPECT_EQ(ranks_[0]->wait_exit(std::chrono::seconds(20)), 3);
  EXPECT_NE(ranks_[0]->err().find("nansense (rank 0): rank 1 of 2 stopped answering"), std::string::npos)
      << ranks_[0]->err();
}

// Rank 0 (which hosts the store) killed: a follower waiting at the boundary
// ends at once with an error saying the store stopped answering.
TEST_F(DdpTest, KilledRankZeroEndsTheFollowersAtOnce) {
  launch(2);
  expect_paused_at(wait_state("paused"), 0, 0);
  expect_all_at(0, 0);
  ranks_[0]->kill_now();
  const auto killed = Clock::now();
  EXPECT_EQ(ranks_[1]->wait_exit(std::chrono::seconds(20)), 3) << ranks_[1]->err();
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(ranks_[1]->err().find("nansense (rank 1): the run's store stopped answering"), std::string::npos)
      << ranks_[1]->err();
  std::cout << "rank 1 ended " << seconds << " s after rank 0 was killed\n";
}

// (e) nansense started on only some ranks: the ranks that started it are
// refused with a message after the timeout, not left waiting.
TEST_F(DdpTest, StartOnOnlySomeRanksIsRefused) {
  launch(2, [](int r) { return r == 1 ? std::vector<std::string>{"--no-nansense"} : std::vector<std::string>{}; },
         {"NANSENSE_DDP_TIMEOUT=2"});
  EXPECT_EQ(ranks_[0]->wait_exit(std::chrono::seconds(30)), 3) << ranks_[0]->err();
  const std::string err = ranks_[0]->err();
  EXPECT_NE(err.find("nansense::start() ran on rank(s) 0 but not on rank(s) 1 within 2 s"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir_ / "url")) << "rank 0 served although the run was refused";
}

}  // namespace
