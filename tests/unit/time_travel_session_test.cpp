// Time travel through the session: jumps paused and running, mid-epoch and
// between phases, repeated; exact replay; resume from another session's
// cache; every misuse; corrupted files; the budget; a failing disk.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "nansense/nansense.h"
#include "session/session_access.h"
#include "test_models.h"

namespace nansense {
namespace {

namespace fs = std::filesystem;
using test::DropNet;
using test::Gate;
using test::kWait;
using test::message_of;
using test::TrainingThread;

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("nansense_tts_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

struct ToyData : torch::data::datasets::Dataset<ToyData> {
  explicit ToyData(int64_t n) : x(torch::randn({n, 4})), y(torch::randint(3, {n})) {}
  torch::data::Example<> get(size_t i) override { return {x[static_cast<int64_t>(i)], y[static_cast<int64_t>(i)]}; }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x.size(0)); }
  torch::Tensor x, y;
};

using Key = std::tuple<int64_t, std::string, int64_t>;  // epoch, phase, batch

// A loop of `epochs` x (train: 4 shuffled batches, val: 2 batches) with
// dropout, Adam and StepLR; records every batch's loss in order.
struct Loop {
  // `split`: Adam trains fc1 and SGD with momentum trains fc2 (two optimizers).
  explicit Loop(int64_t hidden = 16, bool adam = true, bool split = false)
      : model(hidden),
        loader(torch::data::make_data_loader(ToyData(24).map(torch::data::transforms::Stack<>()),
                                             torch::data::DataLoaderOptions().batch_size(6))),
        val(test::make_batches(2, 6)) {
    if (split) {
      opt = std::make_unique<torch::optim::Adam>(model->fc1->parameters(), torch::optim::AdamOptions(0.01));
      opt2 =
          std::make_unique<torch::optim::SGD>(model->fc2->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    } else if (adam) {
      opt = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.01));
    } else {
      opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05));
    }
    sched = std::make_unique<torch::optim::StepLR>(*opt, 1, 0.5);
  }

  Session start() {
    std::vector<torch::optim::Optimizer*> all{opt.get()};
    if (opt2) all.push_back(opt2.get());
    return nansense::start(model, StartOptions().optimizers(all).scheduler(sched.get()));
  }

  void run(Session& s, int64_t epochs, EpochOptions options) {
    s.epochs(
        epochs,
        [&](int64_t epoch) {
          if (at_epoch_start) at_epoch_start(epoch);
          model->train();
          try {
            for (auto& batch : s.batches(*loader, "train")) {
              opt->zero_grad();
              if (opt2) opt2->zero_grad();
              auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
              loss.backward();
              opt->step();
              if (opt2) opt2->step();
              record(s, loss);
            }
          } catch (const std::exception&) {
            ++swallowed;  // a jump must never land here
            throw;
          }
          torch::NoGradGuard no_grad;
          model->eval();
          for (auto& batch : s.batches(val, "val"))
            record(s, torch::cross_entropy_loss(model->forward(batch.first), batch.second));
          sched->step();
        },
        options);
    s.close();
  }

  void record(Session& s, const torch::Tensor& loss) {
    auto pos = *s.live_position();
    {
      std::lock_guard lock(mu);
      losses.emplace_back(Key{pos.epoch, pos.phase, pos.batch_idx}, loss.item<float>());
    }
    if (on_batch) on_batch(pos);
  }

  std::vector<std::pair<Key, float>> recorded() {
    std::lock_guard lock(mu);
    return losses;
  }

  DropNet model{16};
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::unique_ptr<torch::optim::Optimizer> opt2;  // null unless split
  std::unique_ptr<torch::optim::StepLR> sched;
  decltype(torch::data::make_data_loader(ToyData(1).map(torch::data::transforms::Stack<>()))) loader;
  std::vector<test::Batch> val;
  std::function<void(const BatchPosition&)> on_batch;  // training thread, after each batch body
  std::function<void(int64_t)> at_epoch_start;         // training thread
  std::atomic<int> swallowed{0};
  std::mutex mu;
  std::vector<std::pair<Key, float>> losses;
};

BatchPosition at(std::string phase, int64_t epoch, int64_t batch) {
  BatchPosition p;
  p.phase = std::move(phase);
  p.epoch = epoch;
  p.batch_idx = batch;
  return p;
}

void expect_paused_at(const Session& s, const BatchPosition& want) {
  ASSERT_EQ(s.wait_until_stopped(kWait), RunState::kPaused) << "expected a pause at " << want.to_string();
  auto live = s.live_position();
  ASSERT_TRUE(live);
  EXPECT_TRUE(live->same_batch(want)) << "paused at " << live->to_string() << ", expected " << want.to_string();
}

std::vector<float> params_of(torch::nn::Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters()) {
    auto flat = p.detach().flatten();
    out.insert(out.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  }
  return out;
}

TEST(TimeTravel, ReplayAfterAJumpReproducesEveryLossBitForBit) {
  torch::manual_seed(1);
  Loop loop;
  auto session = loop.start();
  const auto dir = fresh_dir("determinism");
  TrainingThread t(session, [&] { loop.run(session, 4, EpochOptions().cache_dir(dir.string())); });
  expect_paused_at(session, at("train", 0, 0));
  session.run();
  expect_paused_at(session, at("val", 3, 1));  // the last batch of the run
  const auto first_pass = loop.recorded();
  ASSERT_EQ(first_pass.size(), 24u);
  EXPECT_EQ(session.time_travel_status().cached_epochs, (std::vector<int64_t>{0, 1, 2, 3}));

  session.request_time_travel(1);
  expect_paused_at(session, at("train", 1, 0));
  session.run();
  expect_paused_at(session, at("val", 3, 1));
  session.detach();
  t.join();
  EXPECT_EQ(session.state(), RunState::kFinished);

  auto all = loop.recorded();
  std::vector<std::pair<Key, float>> replay(all.begin() + static_cast<long>(first_pass.size()), all.end());
  ASSERT_EQ(replay.size(), 18u);
  for (size_t i = 0; i < replay.size(); ++i) {
    const auto& want = first_pass[6 + i];
    EXPECT_EQ(replay[i].first, want.first);
    EXPECT_EQ(replay[i].second, want.second) << "loss differs at epoch " << std::get<0>(want.first) << " "
                                             << std::get<1>(want.first) << " batch " << std::get<2>(want.first);
  }
  EXPECT_EQ(loop.swallowed, 0) << "catch (const std::exception&) must not see a jump";
  EXPECT_EQ(session.time_travel_status().jumps, 1);
  fs::remove_all(dir);
}

// Probes (a pinned batch re-run at every capture, train mode, a perturbed
// input) change nothing: the run's losses are those of a run without them,
// and a replay after a jump is still bit for bit.
TEST(TimeTravel, ProbesChangeNoLossAndReplaysStayBitForBit) {
  auto run = [](bool probe, std::vector<std::pair<Key, float>>* replayed) {
    torch::manual_seed(6);
    Loop loop;
    auto session = loop.start();
    const auto dir = fresh_dir(probe ? "probes" : "no_probes");
    TrainingThread t(session, [&] { loop.run(session, 3, EpochOptions().cache_dir(dir.string())); });
    expect_paused_at(session, at("train", 0, 0));
    if (probe) {
      auto& probes = detail::core_of(session)->probes();
      probes.pin();
      probes.set_mode(experiments::ProbeMode::kTrain);
      probes.add_perturbation({0, 2, {1}, {3.0}});
      auto r = probes.wait_for_run_after(0, kWait);
      EXPECT_TRUE(r && r->view) << (r ? r->error : "no probe run");
    }
    // Step a few batches (each a capture that re-runs the probe), then run on.
    for (int i = 0; i < 3; ++i) {
      session.step_batch();
      EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
    }
    session.run();
    expect_paused_at(session, at("val", 2, 1));
    const auto first_pass = loop.recorded();
    if (probe) EXPECT_GT(detail::core_of(session)->probes().runs_completed(), 3u);
    session.request_time_travel(1);
    expect_paused_at(session, at("train", 1, 0));
    session.run();
    expect_paused_at(session, at("val", 2, 1));
    session.detach();
    t.join();
    auto all = loop.recorded();
    if (replayed) replayed->assign(all.begin() + static_cast<long>(first_pass.size()), all.end());
    fs::remove_all(dir);
    return first_pass;
  };
  std::vector<std::pair<Key, float>> replay;
  const auto with = run(true, &replay);
  const auto without = run(false, nullptr);
  ASSERT_EQ(with.size(), 18u);
  EXPECT_EQ(with, without) << "probes changed training";
  ASSERT_EQ(replay.size(), 12u);
  EXPECT_TRUE(std::equal(replay.begin(), replay.end(), with.begin() + 6)) << "the replay after probes differs";
}

TEST(TimeTravel, JumpsMidEpochBetweenPhasesAndRepeatedly) {
  torch::manual_seed(2);
  Loop loop;
  std::vector<std::pair<int64_t, std::vector<float>>> entries;  // every epoch start, in order
  loop.at_epoch_start = [&](int64_t epoch) { entries.emplace_back(epoch, params_of(*loop.model)); };
  auto session = loop.start();
  const auto dir = fresh_dir("jumps");
  TrainingThread t(session, [&] { loop.run(session, 4, EpochOptions().cache_dir(dir.string())); });
  expect_paused_at(session, at("train", 0, 0));

  // Mid-epoch: from epoch 2's second train batch back to epoch 1.
  session.run_until(at("train", 2, 1));
  expect_paused_at(session, at("train", 2, 1));
  EXPECT_EQ(session.time_travel_status().cached_epochs, (std::vector<int64_t>{0, 1, 2}));
  session.request_time_travel(1);
  expect_paused_at(session, at("train", 1, 0));
  EXPECT_EQ(session.time_travel_status().current_epoch, 1);
  EXPECT_EQ(session.mode(), Mode::kStepBatch);

  // Between phases: from epoch 1's first val batch back to epoch 0.
  session.run_until(at("val", 1, 0));
  expect_paused_at(session, at("val", 1, 0));
  session.request_time_travel(0);
  expect_paused_at(session, at("train", 0, 0));

  // Forward again, onto a checkpoint of the abandoned timeline.
  EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(3); }).find("not cached"), std::string::npos);
  session.request_time_travel(2);
  expect_paused_at(session, at("train", 2, 0));
  session.detach();
  t.join();
  EXPECT_EQ(session.state(), RunState::kFinished);
  EXPECT_EQ(session.time_travel_status().jumps, 3);
  EXPECT_EQ(loop.swallowed, 0);

  // Every re-entry starts from exactly the state of that epoch's first start.
  std::map<int64_t, std::vector<float>> first;
  std::vector<int64_t> order;
  for (const auto& [epoch, params] : entries) {
    order.push_back(epoch);
    if (!first.count(epoch)) {
      first[epoch] = params;
    } else {
      EXPECT_EQ(params, first[epoch]) << "state differs on re-entering epoch " << epoch;
    }
  }
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 1, 0, 2, 3}));
  fs::remove_all(dir);
}

TEST(TimeTravel, JumpsWhileRunning) {
  torch::manual_seed(3);
  Loop loop;
  Gate reached, go;
  std::atomic<bool> held{false};
  loop.on_batch = [&](const BatchPosition& pos) {
    if (pos.same_batch(at("train", 2, 1)) && !held.exchange(true)) {
      reached.open();
      go.wait();
    }
  };
  auto session = loop.start();
  const auto dir = fresh_dir("running");
  TrainingThread t(session, [&] { loop.run(session, 4, EpochOptions().cache_dir(dir.string())); });
  expect_paused_at(session, at("train", 0, 0));
  session.run();
  ASSERT_TRUE(reached.wait());
  EXPECT_EQ(session.state(), RunState::kRunning);
  session.request_time_travel(1);
  EXPECT_EQ(session.time_travel_status().pending_epoch, 1);
  go.open();
  expect_paused_at(session, at("train", 1, 0));
  EXPECT_FALSE(session.time_travel_status().pending_epoch);
  session.detach();
  t.join();
  EXPECT_EQ(session.state(), RunState::kFinished);
  fs::remove_all(dir);
}

TEST(TimeTravel, RefusesEveryMisuseWithAClearError) {
  // No epochs() loop.
  {
    test::Mlp model;
    auto session = nansense::start(model);
    auto data = test::make_batches(3);
    TrainingThread t(session, [&] {
      for (auto& b : session.batches(data, "train")) model->forward(b.first);
      session.close();
    });
    ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
    EXPECT_FALSE(session.time_travel_status().available);
    EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(0); }).find("session.epochs(n, body)"),
              std::string::npos);
    session.detach();
    t.join();
    EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(0); }).find("finished"), std::string::npos);
  }
  // Out of range, not cached, after the loop ended, after close.
  torch::manual_seed(4);
  Loop loop;
  auto session = loop.start();
  const auto dir = fresh_dir("misuse");
  Gate ended, proceed;
  TrainingThread t(session, [&] {
    session.epochs(
        2,
        [&](int64_t) {
          for (auto& b : session.batches(*loop.loader, "train")) loop.model->forward(b.data);
        },
        EpochOptions().cache_dir(dir.string()));
    ended.open();
    proceed.wait();
    session.close();
  });
  expect_paused_at(session, at("train", 0, 0));
  EXPECT_TRUE(session.time_travel_status().available);
  EXPECT_EQ(session.time_travel_status().total_epochs, 2);
  EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(2); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(-1); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(1); }).find("not cached"), std::string::npos);
  EXPECT_EQ(session.state(), RunState::kPaused) << "a refused jump leaves the pause alone";
  session.detach();
  ASSERT_TRUE(ended.wait());
  auto status = session.time_travel_status();
  EXPECT_FALSE(status.available);
  EXPECT_NE(status.reason.find("ended"), std::string::npos);
  EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(0); }).find("ended"), std::string::npos);
  proceed.open();
  t.join();
  EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(0); }).find("finished"), std::string::npos);
  // Bad loop arguments.
  Loop other;
  auto s2 = other.start();
  EXPECT_NE(message_of<TimeTravelError>([&] {
              s2.epochs(
                  3, [](int64_t) {}, EpochOptions().cache_dir(dir.string()).start_epoch(3));
            }).find("out of range"),
            std::string::npos);
  EXPECT_THROW(s2.epochs(0, [](int64_t) {}), UsageError);
  s2.close();
  fs::remove_all(dir);
}

TEST(TimeTravel, ALostLoopRefusesJumps) {
  Loop loop;
  auto session = loop.start();
  const auto dir = fresh_dir("lost");
  TrainingThread t(session, [&] {
    session.epochs(
        2,
        [&](int64_t) {
          for (auto& b : session.batches(*loop.loader, "train")) {
            loop.model->forward(b.data);
            throw std::runtime_error("user bug");
          }
        },
        EpochOptions().cache_dir(dir.string()));
  });
  t.join();
  EXPECT_EQ(session.state(), RunState::kLost);
  EXPECT_NE(message_of<TimeTravelError>([&] { session.request_time_travel(0); }).find("lost"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TimeTravel, ADisabledSessionRunsTheBodyAndNeverTouchesTheDisk) {
  test::Mlp model;
  auto session = nansense::start(model, StartOptions().enabled(false));
  const auto dir = fresh_dir("disabled");
  std::vector<int64_t> seen;
  session.epochs(
      3, [&](int64_t e) { seen.push_back(e); }, EpochOptions().cache_dir(dir.string()).start_epoch(2));
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(session.time_travel_status().available);
  EXPECT_THROW(session.request_time_travel(0), TimeTravelError);
}

// Runs `loop` through `epochs` without pausing; returns the parameters at
// every epoch start.
std::map<int64_t, std::vector<float>> train_detached(Loop& loop, Session& session, int64_t epochs,
                                                     EpochOptions options) {
  std::map<int64_t, std::vector<float>> starts;
  loop.at_epoch_start = [&](int64_t e) { starts[e] = params_of(*loop.model); };
  session.detach();
  loop.run(session, epochs, options);
  loop.at_epoch_start = nullptr;
  return starts;
}

TEST(TimeTravel, ResumesFromAnotherSessionsCache) {
  const auto dir = fresh_dir("resume");
  torch::manual_seed(5);
  Loop writer;
  std::map<int64_t, std::vector<float>> written;
  {
    auto session = writer.start();
    written = train_detached(writer, session, 3, EpochOptions().cache_dir(dir.string()));
  }
  std::map<Key, float> writer_losses(writer.losses.begin(), writer.losses.end());

  torch::manual_seed(5);  // the same data...
  Loop reader;
  {
    torch::NoGradGuard no_grad;  // ...but other weights: the resume must overwrite them
    for (auto& p : reader.model->parameters()) p.add_(1);
  }
  torch::manual_seed(99);  // and another RNG state
  auto session = reader.start();
  auto starts = train_detached(reader, session, 3, EpochOptions().cache_dir(dir.string()).start_epoch(2));
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[2], written[2]);
  EXPECT_EQ(session.time_travel_status().cached_epochs, (std::vector<int64_t>{0, 1, 2}));
  // Same losses as the writer's epoch 2: optimizer state, LR and RNG came along.
  ASSERT_EQ(reader.losses.size(), 6u);
  for (const auto& [key, loss] : reader.losses) EXPECT_EQ(loss, writer_losses.at(key));
  EXPECT_DOUBLE_EQ(reader.opt->param_groups()[0].options().get_lr(), 0.01 * 0.5 * 0.5)
      << "the LR and StepLR's step count are restored (StepLR leaves its first step's LR alone)";

  // A different model, optimizer or a missing epoch: refused up front, naming why.
  Loop narrow(8);
  auto s1 = narrow.start();
  auto why = message_of<TimeTravelError>([&] {
    s1.epochs(
        3, [](int64_t) {}, EpochOptions().cache_dir(dir.string()).start_epoch(1));
  });
  EXPECT_NE(why.find("parameter 'fc1.weight' has shape [16, 4] in the cache but [8, 4]"), std::string::npos) << why;
  s1.close();
  Loop sgd(16, /*adam=*/false);
  auto s2 = sgd.start();
  why = message_of<TimeTravelError>([&] {
    s2.epochs(
        3, [](int64_t) {}, EpochOptions().cache_dir(dir.string()).start_epoch(1));
  });
  EXPECT_NE(why.find("optimizer is torch::optim::Adam in the cache but torch::optim::SGD"), std::string::npos) << why;
  s2.close();
  Loop longer;
  auto s3 = longer.start();
  why = message_of<TimeTravelError>([&] {
    s3.epochs(
        5, [](int64_t) {}, EpochOptions().cache_dir(dir.string()).start_epoch(3));
  });
  EXPECT_NE(why.find("no usable checkpoint"), std::string::npos) << why;
  s3.close();
  fs::remove_all(dir);
}

TEST(TimeTravel, ResumesEveryOptimizerInOrder) {
  const auto dir = fresh_dir("resume_two");
  torch::manual_seed(5);
  Loop writer(16, true, /*split=*/true);
  std::map<int64_t, std::vector<float>> written;
  {
    auto session = writer.start();
    written = train_detached(writer, session, 3, EpochOptions().cache_dir(dir.string()));
  }
  std::map<Key, float> writer_losses(writer.losses.begin(), writer.losses.end());

  torch::manual_seed(5);
  Loop reader(16, true, /*split=*/true);
  torch::manual_seed(99);
  auto session = reader.start();
  auto starts = train_detached(reader, session, 3, EpochOptions().cache_dir(dir.string()).start_epoch(2));
  EXPECT_EQ(starts[2], written[2]);
  ASSERT_EQ(reader.losses.size(), 6u);
  for (const auto& [key, loss] : reader.losses) EXPECT_EQ(loss, writer_losses.at(key)) << "SGD's momentum came along";

  Loop single;
  auto s1 = single.start();
  auto why = message_of<TimeTravelError>([&] {
    s1.epochs(
        3, [](int64_t) {}, EpochOptions().cache_dir(dir.string()).start_epoch(1));
  });
  EXPECT_NE(why.find("the cache holds the state of 2 optimizers (torch::optim::Adam, torch::optim::SGD) but 1 was "
                     "given (torch::optim::Adam)"),
            std::string::npos)
      << why;
  s1.close();
  fs::remove_all(dir);
}

TEST(TimeTravel, AnOldFormatCacheIsReportedNeverLoaded) {
  const auto dir = fresh_dir("old_format");
  fs::create_directories(dir);
  std::ofstream(dir / "epoch_0.ckpt", std::ios::binary) << "NSCKPT01" << std::string(100, '\1');
  Loop loop;
  auto session = loop.start();
  auto why = message_of<TimeTravelError>([&] {
    session.epochs(
        2, [](int64_t) {}, EpochOptions().cache_dir(dir.string()).start_epoch(1));
  });
  EXPECT_NE(why.find("epoch_0.ckpt is a time-travel checkpoint in an older nansense format"), std::string::npos) << why;
  session.close();
  // Training from scratch over it reports it and writes the current format.
  Loop again;
  auto s2 = again.start();
  s2.detach();
  again.run(s2, 1, EpochOptions().cache_dir(dir.string()));
  EXPECT_NE(s2.time_travel_status().last_error.find("older nansense format"), std::string::npos)
      << s2.time_travel_status().last_error;
  EXPECT_EQ(s2.time_travel_status().cached_epochs, (std::vector<int64_t>{0}));
  fs::remove_all(dir);
}

void flip_byte(const fs::path& file, std::streamoff offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(TimeTravel, CorruptedAndTruncatedCheckpointsAreReportedNeverLoaded) {
  torch::manual_seed(6);
  Loop loop;
  auto session = loop.start();
  const auto dir = fresh_dir("corrupt");
  TrainingThread t(session, [&] { loop.run(session, 4, EpochOptions().cache_dir(dir.string())); });
  expect_paused_at(session, at("train", 0, 0));
  session.run_until(at("train", 2, 0));
  expect_paused_at(session, at("train", 2, 0));
  const auto before = params_of(*loop.model);
  detail::core_of(session)->restorer().store()->wait_idle();  // files are put in place in the background
  flip_byte(dir / "epoch_1.ckpt", static_cast<std::streamoff>(fs::file_size(dir / "epoch_1.ckpt") / 2));
  auto why = message_of<TimeTravelError>([&] { session.request_time_travel(1); });
  EXPECT_NE(why.find("checksum mismatch"), std::string::npos) << why;
  fs::resize_file(dir / "epoch_0.ckpt", fs::file_size(dir / "epoch_0.ckpt") - 7);
  why = message_of<TimeTravelError>([&] { session.request_time_travel(0); });
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  auto status = session.time_travel_status();
  EXPECT_EQ(status.cached_epochs, (std::vector<int64_t>{2}));
  EXPECT_NE(status.last_error.find("truncated"), std::string::npos);
  EXPECT_EQ(session.state(), RunState::kPaused);
  EXPECT_EQ(params_of(*loop.model), before) << "nothing was loaded";
  session.request_time_travel(2);
  expect_paused_at(session, at("train", 2, 0));
  session.detach();
  t.join();
  EXPECT_EQ(session.state(), RunState::kFinished);

  // A later run that adopts the folder skips the damaged files, and says so.
  Loop again;
  auto s2 = again.start();
  why = message_of<TimeTravelError>([&] {
    s2.epochs(
        4, [](int64_t) {}, EpochOptions().cache_dir(dir.string()).start_epoch(1));
  });
  EXPECT_NE(why.find("checksum mismatch"), std::string::npos) << why;
  s2.close();
  fs::remove_all(dir);
}

TEST(TimeTravel, BudgetEvictsOldestButKeepsEpochZero) {
  torch::manual_seed(7);
  Loop loop;
  auto session = loop.start();
  const auto dir = fresh_dir("budget");
  session.detach();
  loop.run(session, 4, EpochOptions().cache_dir(dir.string()).cache_budget_bytes(1));
  auto status = session.time_travel_status();
  EXPECT_EQ(status.cached_epochs, (std::vector<int64_t>{0}));
  EXPECT_TRUE(fs::exists(dir / "epoch_0.ckpt"));
  EXPECT_FALSE(fs::exists(dir / "epoch_3.ckpt"));
  EXPECT_EQ(status.budget_bytes, 1u);
  EXPECT_EQ(status.bytes_used, fs::file_size(dir / "epoch_0.ckpt"));
  fs::remove_all(dir);
}

TEST(TimeTravel, AFailingDiskKeepsTrainingGoing) {
  torch::manual_seed(8);
  Loop loop;
  auto session = loop.start();
  const auto dir = fresh_dir("full");
  loop.at_epoch_start = [&](int64_t e) {
    if (e == 0) {
      detail::core_of(session)->restorer().store()->set_write_fault([](uint64_t, size_t) { return true; });
    }
  };
  session.detach();
  loop.run(session, 3, EpochOptions().cache_dir(dir.string()));
  EXPECT_EQ(session.state(), RunState::kFinished);
  EXPECT_EQ(loop.losses.size(), 18u);
  auto status = session.time_travel_status();
  EXPECT_EQ(status.cached_epochs, (std::vector<int64_t>{0}));
  // Epochs 1 and 2 failed; their reports arrive in either order.
  EXPECT_NE(status.last_error.find("was not written"), std::string::npos) << status.last_error;
  EXPECT_NE(status.last_error.find("No space left on device"), std::string::npos) << status.last_error;
  int files = 0;
  for ([[maybe_unused]] const auto& _ : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1) << "no temp file is left behind";

  // A cache folder that cannot be created: no time travel, training goes on.
  const auto blocked = fresh_dir("blocked");
  fs::create_directories(blocked);
  std::ofstream(blocked / "file") << "x";
  Loop other;
  auto s2 = other.start();
  s2.detach();
  other.run(s2, 2, EpochOptions().cache_dir((blocked / "file" / "cache").string()));
  EXPECT_EQ(s2.state(), RunState::kFinished);
  EXPECT_EQ(other.losses.size(), 12u);
  EXPECT_NE(s2.time_travel_status().last_error.find("cannot create the cache folder"), std::string::npos);
  fs::remove_all(dir);
  fs::remove_all(blocked);
}

}  // namespace
}  // namespace nansense
