// The model zoo through the C++ API (tests/python/test_zoo.py's C++ side):
// models LibTorch's own frontend builds, not nansense's test models. A
// ResNet of torchvision-style basic blocks with BatchNorm, an LSTM language
// model over token ids, and a TransformerEncoder classifier with a boolean
// src_key_padding_mask, each in a real training loop served on loopback,
// with a NaN mid-run.
//
// For each model: layers are named by module path; every Linear / Conv2d is
// one layer per call; the guard checks every batch to the end (the debug
// report's checked batches are the batches run); the NaN is caught at its
// batch with its producer op and layer named; the snapshot and the strips
// render as PNGs; token ids and the padding mask are drawn as values.
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "integration/training_fixture.h"

namespace nansense::testing {
namespace {

constexpr int64_t kBatches = 5;
constexpr int64_t kNanBatch = 2;
const double kNan = std::numeric_limits<double>::quiet_NaN();

// --- a ResNet as torchvision builds one (BasicBlock, downsample, one ReLU module called twice) ---

struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module(
            "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        relu(register_module("relu", torch::nn::ReLU())),
        conv2(
            register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      downsample = register_module(
          "downsample",
          torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                torch::nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto out = relu(bn1(conv1(x)));
    out = conv2(out);
    if (poison) out = out * kNan;  // the C++ stand-in for a forward hook on conv2
    out = bn2(out);
    auto identity = downsample ? downsample->forward(x) : x;
    return relu(out + identity);
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::ReLU relu;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential downsample{nullptr};
  bool poison = false;
};
TORCH_MODULE(BasicBlock);

struct ResNetImpl : torch::nn::Module {
  explicit ResNetImpl(int64_t classes)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(8))),
        relu(register_module("relu", torch::nn::ReLU())),
        layer1(register_module("layer1", torch::nn::Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 8, 1)))),
        layer2(register_module("layer2", torch::nn::Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16, 1)))),
        avgpool(register_module("avgpool", torch::nn::AdaptiveAvgPool2d(1))),
        fc(register_module("fc", torch::nn::Linear(16, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = layer2->forward(layer1->forward(relu(bn1(conv1(x)))));
    return fc(torch::flatten(avgpool(y), 1));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::ReLU relu;
  torch::nn::Sequential layer1, layer2;
  torch::nn::AdaptiveAvgPool2d avgpool;
  torch::nn::Linear fc;
};
TORCH_MODULE(ResNet);

// --- an LSTM language model: Embedding -> 2-layer LSTM -> Linear over the vocabulary ---

struct LstmLanguageModelImpl : torch::nn::Module {
  LstmLanguageModelImpl(int64_t vocab, int64_t dim, int64_t hidden)
      : emb(register_module("emb", torch::nn::Embedding(vocab, dim))),
        lstm(register_module("lstm",
                             torch::nn::LSTM(torch::nn::LSTMOptions(dim, hidden).num_layers(2).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(hidden, vocab))) {}
  torch::Tensor forward(const torch::Tensor& ids) {
    auto h = std::get<0>(lstm(emb(ids)));
    if (poison) h = h * kNan;  // outside every module call, as a hook on the LSTM's output
    return head(h);
  }
  torch::nn::Embedding emb;
  torch::nn::LSTM lstm;
  torch::nn::Linear head;
  bool poison = false;
};
TORCH_MODULE(LstmLanguageModel);

// --- a TransformerEncoder classifier over token ids with a key padding mask ---

struct TransformerClassifierImpl : torch::nn::Module {
  TransformerClassifierImpl(int64_t vocab, int64_t dim, int64_t classes)
      : emb(register_module("emb", torch::nn::Embedding(vocab, dim))),
        encoder(register_module(
            "encoder", torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                           torch::nn::TransformerEncoderLayerOptions(dim, 2).dim_feedforward(32).dropout(0.0), 2)))),
        head(register_module("head", torch::nn::Linear(dim, classes))) {}
  // ids [B, S] int64, pad [B, S] bool (true: padding)
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& pad) {
    auto x = emb(ids).transpose(0, 1);  // [S, B, D]: LibTorch's encoder is sequence-first
    x = encoder->forward(x, /*src_mask=*/torch::Tensor(), /*src_key_padding_mask=*/pad);
    return head(x.mean(0));
  }
  torch::nn::Embedding emb;
  torch::nn::TransformerEncoder encoder;
  torch::nn::Linear head;
};
TORCH_MODULE(TransformerClassifier);

// What one zoo model must show.
struct ZooCase {
  std::vector<std::string> expected_names;     // layers that must be in the graph
  std::vector<std::string> strips;             // layers whose activation and gradient strips must render
  std::pair<std::string, std::string> weight;  // (layer, parameter) whose weight strip must render
  std::string producer_op;
  std::optional<std::string> producer_layer;  // nullopt: outside the model's layers
  int64_t nan_sample = 0;                     // a sample of the producer's output that holds the NaN
  size_t value_inputs = 0;                    // bool / integer inputs (ids, masks)
};

// Every Linear / Conv2d of the model by module path, and its kind.
std::map<std::string, std::string> linear_modules(const torch::nn::Module& model) {
  std::map<std::string, std::string> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (item.value()->as<torch::nn::Linear>()) out[item.key()] = "Linear";
    if (item.value()->as<torch::nn::Conv2d>()) out[item.key()] = "Conv2d";
  }
  return out;
}

class ZooTest : public TrainingServerTest {
 protected:
  void TearDown() override {
    TrainingServerTest::TearDown();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  json picture(const std::string& target) {
    auto reply = get(target);
    EXPECT_EQ(reply.status, 200u) << target << ": " << reply.body.substr(0, 300);
    EXPECT_EQ(reply.body.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << target << ": not a PNG";
    EXPECT_TRUE(reply.headers.count("X-Nansense-Render")) << target;
    if (!reply.headers.count("X-Nansense-Render")) return json::object();
    return json::parse(reply.headers["X-Nansense-Render"]);
  }

  // Trains `model` on `data` served, with a NaN at kNanBatch (made by
  // `poison(true)` on that batch, or by the data itself), and checks it end
  // to end. Returns the architecture as served.
  template <class Holder, class Batch>
  json run_zoo(Holder model, std::vector<Batch>& data, std::function<torch::Tensor(Batch&)> loss_of,
               std::function<void(bool)> poison, const ZooCase& c) {
    const auto linears = linear_modules(*model);
    EXPECT_FALSE(linears.empty());
    dir_ = std::filesystem::temp_directory_path() / ("nansense-zoo-" + std::to_string(::getpid()));
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    session_ = std::make_unique<nansense::Session>(
        nansense::start(model, nansense::StartOptions()
                                   .epochs(1)
                                   .phases(nansense::PhaseCounts{{"train", kBatches}})
                                   .optimizer(&optimizer)
                                   .debug(nansense::DebugSettings().capsule_dir(dir_.string()))));
    EXPECT_TRUE(nansense::serve(*session_, nansense::ServeOptions().port(0).open_browser(false).print_banner(false)));
    port_ = port_of(session_->url());
    std::vector<int64_t> bodies;
    trainer_ = std::thread([&] {
      try {
        model->train();
        for (auto& batch : session_->batches(data, "train")) {
          const int64_t batch_idx = session_->live_position()->batch_idx;
          bodies.push_back(batch_idx);
          if (poison) poison(batch_idx == kNanBatch);
          optimizer.zero_grad();
          loss_of(batch).backward();
          optimizer.step();
        }
        session_->close();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "the training loop threw: " << e.what();
      }
    });

    // The first batch pauses (a served session starts in step_batch).
    EXPECT_EQ(session_->wait_until_stopped(60s), nansense::RunState::kPaused);
    EXPECT_EQ(session_->live_position()->batch_idx, 0);

    // (a) Layers are named by module path.
    const json arch = get("/api/architecture").json();
    std::vector<std::string> names;
    for (const auto& layer : arch["layers"]) names.push_back(layer["name"]);
    for (const auto& name : c.expected_names) {
      EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name << " not in " << json(names);
    }

    // (b) Every Linear / Conv2d is one layer per call (each is called once
    // per forward here), named by its path, of its kind.
    std::map<std::string, int> calls;
    size_t linear_layers = 0;
    for (const auto& layer : arch["layers"]) {
      const std::string module = layer.value("module", "");
      const std::string kind = layer.value("kind", "");
      if (linears.count(module)) {
        ++calls[module];
        EXPECT_EQ(layer["name"], module);
        EXPECT_EQ(kind, linears.at(module)) << module;
      }
      if (kind == "Linear" || kind == "Conv2d") ++linear_layers;
    }
    for (const auto& [module, kind] : linears) EXPECT_EQ(calls[module], 1) << module << " (" << kind << ")";
    EXPECT_EQ(linear_layers, linears.size());

    // (e) The snapshot and the strips render.
    auto snap = session_->snapshot();
    EXPECT_TRUE(snap && snap->position.batch_idx == 0);
    const json http_snap = get("/api/snapshot").json();
    for (const auto& name : c.strips) {
      EXPECT_TRUE(snap->activations.count(name)) << name;
      if (snap->activations.count(name)) {
        EXPECT_TRUE(torch::isfinite(snap->activations.at(name)).all().template item<bool>()) << name;
      }
      EXPECT_TRUE(snap->activation_gradients.count(name)) << name;
      for (const std::string kind : {"activation", "gradient"}) {
        auto info = picture("/api/render/strip?layer=" + name + "&kind=" + kind + "&sample=0");
        EXPECT_EQ(info.value("layer", ""), name);
        EXPECT_EQ(info.value("kind", ""), kind);
        EXPECT_EQ(info.value("nan", -1), 0) << info.dump();
      }
    }
    const auto& [weight_layer, parameter] = c.weight;
    auto info = picture("/api/render/weight_strip?layer=" + weight_layer + "&parameter=" + parameter);
    EXPECT_EQ(info.value("layer", ""), weight_layer);
    // Paused after the step: the snapshot's weights are the live ones.
    const auto params = model->named_parameters();
    EXPECT_TRUE(snap->weights.count(parameter) && torch::equal(snap->weights.at(parameter), params[parameter]))
        << parameter;
    info = picture("/api/render/input?sample=0");
    EXPECT_EQ(info.value("name", ""), names.front());
    // Bool and integer inputs (token ids, padding masks) are drawn as values:
    // their input layers' strips and their input pictures.
    size_t value_inputs = 0;
    for (const auto& entry : http_snap["inputs"]) {
      const std::string dtype = entry["dtype"];
      if (dtype != "bool" && dtype.rfind("int", 0) != 0) continue;
      ++value_inputs;
      auto strip = picture("/api/render/strip?layer=" + entry["name"].get<std::string>() + "&kind=activation&sample=0");
      EXPECT_EQ(strip.value("scale", ""), dtype == "bool" ? "boolean" : "categorical") << strip.dump();
      auto input = picture("/api/render/input?input=" + std::to_string(entry["index"].get<int>()) + "&sample=0");
      const std::string layout = input.value("layout", "");
      EXPECT_TRUE(layout == "values" || layout == "strip") << input.dump();
      EXPECT_EQ(input.value("dtype", ""), dtype);
    }
    EXPECT_EQ(value_inputs, c.value_inputs) << http_snap["inputs"].dump();

    // (d) The NaN is caught at its batch, before the optimizer step.
    session_->detach();
    EXPECT_EQ(session_->wait_until_stopped(60s), nansense::RunState::kPaused);
    auto error = session_->debug_error();
    EXPECT_TRUE(error.has_value());
    if (error) {
      EXPECT_EQ(error->position.batch_idx, kNanBatch);
      EXPECT_NE(std::find(error->reasons.begin(), error->reasons.end(), "nan"), error->reasons.end());
      EXPECT_TRUE(error->rerun);
      EXPECT_TRUE(std::filesystem::is_regular_file(error->capsule)) << error->capsule;
    }
    const json report = get("/api/debug").json();
    const json& cause = report["error"]["root_cause"];
    EXPECT_EQ(cause["status"], "found") << cause.dump();
    EXPECT_EQ(cause["producer"]["op"], c.producer_op) << cause["summary"];
    EXPECT_EQ(cause["producer"]["pass"], "forward") << cause["summary"];
    EXPECT_EQ(cause["producer"]["layer"], c.producer_layer ? json(*c.producer_layer) : json(nullptr))
        << cause["summary"];
    EXPECT_EQ(cause["producer"]["inputs"][0]["nan"], 0) << cause["producer"].dump();
    EXPECT_EQ(report["error"]["update"], "held");
    // The tripped batch's strips render, NaNs counted.
    const std::string nan_layer = c.producer_layer ? *c.producer_layer : c.strips.back();
    info = picture("/api/render/strip?layer=" + nan_layer + "&kind=" + (c.producer_layer ? "activation" : "gradient") +
                   "&sample=" + std::to_string(c.nan_sample));
    EXPECT_GT(info.value("nan", 0), 0) << info.dump();
    // Skip the poisoned update, then run on to the end.
    EXPECT_EQ(post("/api/debug/choose_update", {{"action", "skip"}}).json()["skip_update"], true);
    session_->detach();
    trainer_.join();

    // (c) The guard checked every batch to the end and never turned off.
    EXPECT_EQ(session_->state(), nansense::RunState::kFinished);
    EXPECT_TRUE(get("/api/status").json().value("internal_errors", json::array()).empty());
    // The tripped batch ran twice (untraced, then its traced re-run).
    EXPECT_EQ(bodies, (std::vector<int64_t>{0, 1, kNanBatch, kNanBatch, 3, 4}));
    const json end = get("/api/debug").json();
    EXPECT_EQ(end["settings"]["enabled"], true);
    EXPECT_EQ(end["checked_batches"], kBatches + 1);  // every batch, and the traced re-run
    EXPECT_TRUE(end["unchecked_tensors"].empty()) << end["unchecked_tensors"].dump();
    for (const auto& p : model->named_parameters()) {
      EXPECT_TRUE(torch::isfinite(p.value()).all().template item<bool>()) << p.key() << ": the skipped update";
    }
    return arch;
  }

  std::filesystem::path dir_;
};

using ImageBatch = std::pair<torch::Tensor, torch::Tensor>;

TEST_F(ZooTest, AResNetOfBasicBlocksWithBatchNorm) {
  torch::manual_seed(0);
  ResNet model(10);
  std::vector<ImageBatch> data;
  for (int64_t i = 0; i < kBatches; ++i) data.emplace_back(torch::randn({4, 3, 16, 16}), torch::randint(10, {4}));
  auto block = model->layer2[1]->as<BasicBlock>();
  auto arch = run_zoo<ResNet, ImageBatch>(
      model, data, [&](ImageBatch& b) { return torch::cross_entropy_loss(model->forward(b.first), b.second); },
      [&](bool on) { block->poison = on; },
      ZooCase{.expected_names = {"input", "conv1", "bn1", "relu", "layer1.0.conv1", "layer1.0.relu", "layer1.0.relu#2",
                                 "layer1.0.add", "layer1.1.relu#2", "layer2.0.downsample.0", "layer2.0.downsample.1",
                                 "layer2.1.bn2", "layer2.1.add", "layer2.1.relu#2", "avgpool", "fc"},
              .strips = {"layer1.0.conv1", "layer2.1.bn2"},
              .weight = {"conv1", "conv1.weight"},
              .producer_op = "aten::mul",
              .producer_layer = "layer2.1.mul"});
  std::map<std::string, std::string> kinds;
  for (const auto& layer : arch["layers"]) kinds[layer["name"]] = layer["kind"];
  EXPECT_EQ(kinds["layer1.0.bn1"], "BatchNorm2d");
  EXPECT_EQ(kinds["layer2.0.downsample.1"], "BatchNorm2d");
  EXPECT_EQ(kinds["layer1.0.relu#2"], "ReLU");
}

using TokenBatch = std::pair<torch::Tensor, torch::Tensor>;  // ids, next ids

TEST_F(ZooTest, AnLstmLanguageModelOverTokenIds) {
  torch::manual_seed(0);
  LstmLanguageModel model(50, 16, 32);
  std::vector<TokenBatch> data;
  for (int64_t i = 0; i < kBatches; ++i) {
    auto ids = torch::randint(50, {4, 13});
    data.emplace_back(ids.slice(1, 0, 12).contiguous(), ids.slice(1, 1, 13).contiguous());
  }
  auto arch = run_zoo<LstmLanguageModel, TokenBatch>(
      model, data,
      [&](TokenBatch& b) {
        return torch::cross_entropy_loss(model->forward(b.first).flatten(0, 1), b.second.flatten());
      },
      [&](bool on) { model->poison = on; },
      ZooCase{.expected_names = {"input", "emb", "lstm", "head"},
              .strips = {"lstm", "head"},
              .weight = {"lstm", "lstm.weight_ih_l0"},
              .producer_op = "aten::mul",
              .producer_layer = "mul",
              .value_inputs = 1});
  std::map<std::string, std::string> kinds;
  for (const auto& layer : arch["layers"]) kinds[layer["name"]] = layer["kind"];
  EXPECT_EQ(kinds["emb"], "Embedding");
  EXPECT_EQ(kinds["lstm"], "LSTM");
  EXPECT_EQ(kinds["head"], "Linear");
  EXPECT_EQ(arch["inputs"], json({"input"}));
}

using TextBatch = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>;  // ids, pad, label

TEST_F(ZooTest, ATransformerEncoderClassifierWithAKeyPaddingMask) {
  torch::manual_seed(0);
  TransformerClassifier model(30, 16, 3);
  std::vector<TextBatch> data;
  for (int64_t i = 0; i < kBatches; ++i) {
    auto pad = torch::zeros({4, 8}, torch::kBool);
    pad.index_put_({1, torch::indexing::Slice(5, torch::indexing::None)}, true);
    // A fully padded sample: its attention has no key to attend to, and the
    // softmax over all -inf scores is NaN (issue 33's first finding).
    if (i == kNanBatch) pad.index_put_({3}, true);
    data.emplace_back(torch::randint(30, {4, 8}), pad, torch::randint(3, {4}));
  }
  auto arch = run_zoo<TransformerClassifier, TextBatch>(
      model, data,
      [&](TextBatch& b) {
        auto& [ids, pad, y] = b;
        return torch::cross_entropy_loss(model->forward(ids, pad), y);
      },
      nullptr,
      ZooCase{
          .expected_names = {"input", "input_1", "emb", "encoder.layers.0.self_attn",
                             "encoder.layers.0.self_attn.out_proj", "encoder.layers.0.linear1",
                             "encoder.layers.0.norm1", "encoder.layers.1.linear2", "encoder.layers.1.norm2", "head"},
          .strips = {"encoder.layers.0.linear1", "head"},
          .weight = {"encoder.layers.0.linear1", "encoder.layers.0.linear1.weight"},
          .producer_op = "aten::softmax",
          .producer_layer = "encoder.layers.0.self_attn.softmax",
          // The scores are [batch x heads, S, S]: sample 3's first head.
          .nan_sample = 6,
          .value_inputs = 2});
  EXPECT_EQ(arch["inputs"], json({"input", "input_1"}));
}

}  // namespace
}  // namespace nansense::testing
