// Layer discovery on the models users bring beyond the demo: a transformer
// encoder with a padding mask, a ResNet block, a GAN with two optimizers, the
// upstream MNIST network with a registered Dropout2d.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::kWait;
using test::TrainingThread;
using Edge = std::pair<std::string, std::string>;
using Names = std::vector<std::string>;

// The layers a reader sees by default: shape ops folded away.
Names shown(const Architecture& a) {
  Names out;
  for (const auto& l : a.layers) {
    if (!l.shape_op) out.push_back(l.name);
  }
  return out;
}

Names shape_ops(const Architecture& a) {
  Names out;
  for (const auto& l : a.layers) {
    if (l.shape_op) out.push_back(l.name);
  }
  return out;
}

using test::incoming;
using test::layer;

template <class Items, class Body>
std::shared_ptr<const BatchSnapshot> capture_first(std::shared_ptr<torch::nn::Module> model, Items& items, Body body,
                                                   StartOptions options = {}) {
  auto session = start(model, options);
  TrainingThread thread(session, [&] {
    for (auto& item : session.batches(items, "train")) body(item);
    session.close();
  });
  const RunState state = session.wait_until_stopped(kWait);
  EXPECT_EQ(state, RunState::kPaused);
  if (state == RunState::kLost) {
    thread.join();
    try {
      if (thread.error()) std::rethrow_exception(thread.error());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the loop threw: " << e.what();
    }
  }
  return session.snapshot();
}

// --- a transformer encoder written the way LibTorch users write one ---

struct AttentionImpl : torch::nn::Module {
  AttentionImpl(int64_t d, int64_t heads)
      : qkv(register_module("qkv", torch::nn::Linear(d, 3 * d))),
        out(register_module("out", torch::nn::Linear(d, d))),
        heads(heads) {}
  // x [B,T,D]; pad [B,T], true where padded.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& pad) {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2), dh = D / heads;
    auto parts = qkv(x).view({B, T, 3, heads, dh}).permute({2, 0, 3, 1, 4});
    auto q = parts.select(0, 0), k = parts.select(0, 1), v = parts.select(0, 2);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
    scores = scores.masked_fill(pad.view({B, 1, 1, T}), -INFINITY);
    auto ctx = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({B, T, D});
    return out(ctx);
  }
  torch::nn::Linear qkv, out;
  int64_t heads;
};
TORCH_MODULE(Attention);

struct EncoderLayerImpl : torch::nn::Module {
  explicit EncoderLayerImpl(int64_t d)
      : attention(register_module("attention", Attention(d, 2))),
        norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        ff1(register_module("ff1", torch::nn::Linear(d, 2 * d))),
        ff2(register_module("ff2", torch::nn::Linear(2 * d, d))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        dropout(register_module("dropout", torch::nn::Dropout(0.1))) {}
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& pad) {
    x = norm1(x + dropout(attention(x, pad)));
    return norm2(x + ff2(torch::relu(ff1(x))));
  }
  Attention attention;
  torch::nn::LayerNorm norm1;
  torch::nn::Linear ff1, ff2;
  torch::nn::LayerNorm norm2;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(EncoderLayer);

struct TinyTransformerImpl : torch::nn::Module {
  TinyTransformerImpl()
      : embed(register_module("embed", torch::nn::Embedding(20, 8))),
        layers(register_module("layers", torch::nn::ModuleList(EncoderLayer(8), EncoderLayer(8)))),
        head(register_module("head", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad) {
    auto x = embed(tokens);
    for (const auto& l : *layers) x = l->as<EncoderLayer>()->forward(x, pad);
    auto pooled = x.masked_fill(pad.unsqueeze(-1), 0).sum(1) / (~pad).sum(1, true);
    return head(pooled);
  }
  torch::nn::Embedding embed;
  torch::nn::ModuleList layers;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyTransformer);

using TextBatch = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>;  // tokens, pad, target

std::vector<TextBatch> text_batches(int n) {
  std::vector<TextBatch> out;
  for (int i = 0; i < n; ++i) {
    auto pad = torch::zeros({4, 6}, torch::kBool);
    pad.index_put_({torch::indexing::Slice(), torch::indexing::Slice(4, torch::indexing::None)}, true);
    out.emplace_back(torch::randint(20, {4, 6}), pad, torch::randint(3, {4}));
  }
  return out;
}

TEST(TracerModels, ATransformerEncoderReadsLikeItsCode) {
  TinyTransformer model;
  torch::optim::Adam opt(model->parameters(), 1e-3);
  auto data = text_batches(2);
  auto snap = capture_first(model.ptr(), data, [&](TextBatch& b) {
    auto& [tokens, pad, y] = b;
    opt.zero_grad();
    torch::cross_entropy_loss(model->forward(tokens, pad), y).backward();
    opt.step();
  });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;

  auto block = [](const std::string& p) {
    return Names{p + "attention.qkv",
                 p + "attention.matmul",
                 p + "attention.div",
                 p + "attention.masked_fill",
                 p + "attention.softmax",
                 p + "attention.matmul_1",
                 p + "attention.out",
                 p + "dropout",
                 p + "add",
                 p + "norm1",
                 p + "ff1",
                 p + "relu",
                 p + "ff2",
                 p + "add_1",
                 p + "norm2"};
  };
  Names want{"input", "input_1", "embed"};
  for (const auto& p : {"layers.0.", "layers.1."}) {
    auto b = block(p);
    want.insert(want.end(), b.begin(), b.end());
  }
  for (const auto& n : {"masked_fill", "sum", "div", "head"}) want.push_back(n);
  EXPECT_EQ(shown(a), want);

  // One layer per Linear call on a 3-D input (matmul + bias add), with both parameters.
  const auto& qkv = layer(a, "layers.0.attention.qkv");
  EXPECT_EQ(qkv.role, LayerInfo::Role::kModule);
  EXPECT_EQ(qkv.kind, "Linear");
  EXPECT_EQ(qkv.parameters, (Names{"layers.0.attention.qkv.weight", "layers.0.attention.qkv.bias"}));
  EXPECT_EQ(qkv.output_shape, (std::vector<int64_t>{4, 6, 24}));
  EXPECT_EQ(layer(a, "layers.0.dropout").kind, "Dropout") << "the registered Dropout module keeps its name";

  // The attention's plumbing is there, flagged, scoped under the attention.
  EXPECT_EQ(shape_ops(a),
            (Names{"layers.0.attention.view", "layers.0.attention.permute", "layers.0.attention.select",
                   "layers.0.attention.select_1", "layers.0.attention.select_2", "layers.0.attention.transpose",
                   "layers.0.attention.transpose_1", "layers.0.attention.reshape", "layers.1.attention.view",
                   "layers.1.attention.permute", "layers.1.attention.select", "layers.1.attention.select_1",
                   "layers.1.attention.select_2", "layers.1.attention.transpose", "layers.1.attention.transpose_1",
                   "layers.1.attention.reshape"}));
  // Edges follow the data through them: qkv -> view -> permute -> select -> matmul.
  EXPECT_EQ(incoming(a, "layers.0.attention.view"), (Names{"layers.0.attention.qkv"}));
  EXPECT_EQ(incoming(a, "layers.0.attention.matmul"),
            (Names{"layers.0.attention.select", "layers.0.attention.transpose"}));
  EXPECT_EQ(incoming(a, "layers.0.add"), (Names{"embed", "layers.0.dropout"}));
  EXPECT_EQ(incoming(a, "layers.1.attention.qkv"), (Names{"layers.0.norm2"}));
  EXPECT_EQ(incoming(a, "embed"), (Names{"input"}));

  // Every layer's activation is captured; gradients reach the attention.
  for (const auto& l : a.layers) EXPECT_TRUE(snap->activations.count(l.name)) << l.name;
  EXPECT_TRUE(snap->activation_gradients.count("layers.0.attention.qkv"));
  EXPECT_TRUE(snap->activation_gradients.count("layers.1.attention.softmax"));
  EXPECT_TRUE(snap->activations.at("layers.0.attention.masked_fill").isinf().any().item<bool>())
      << "the mask's -inf is in the captured scores";
}

// --- a ResNet basic block with a projection shortcut ---

struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))),
        shortcut(register_module("shortcut",
                                 torch::nn::Sequential(torch::nn::Conv2d(in, out, 1), torch::nn::BatchNorm2d(out)))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + shortcut->forward(x));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential shortcut;
};
TORCH_MODULE(BasicBlock);

struct SmallResNetImpl : torch::nn::Module {
  SmallResNetImpl()
      : stem(register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)))),
        block(register_module("block", BasicBlock(4, 8))),
        fc(register_module("fc", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = block(torch::relu(stem(x)));
    return fc(torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d stem;
  BasicBlock block;
  torch::nn::Linear fc;
};
TORCH_MODULE(SmallResNet);

TEST(TracerModels, AResNetBlockHasItsShortcutAndResidualAdd) {
  SmallResNet model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto data = test::make_batches(2, 4, {1, 8, 8});
  auto snap = capture_first(
      model.ptr(), data, [&](test::Batch& b) { test::train_step(model, opt, b.first, b.second); },
      StartOptions().optimizer(&opt));
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;
  EXPECT_EQ(shown(a),
            (Names{"input", "stem", "relu", "block.conv1", "block.bn1", "block.relu", "block.conv2", "block.bn2",
                   "block.shortcut.0", "block.shortcut.1", "add", "relu_1", "adaptive_avg_pool2d", "fc"}));
  EXPECT_EQ(shape_ops(a), (Names{"flatten"}));
  EXPECT_EQ(incoming(a, "add"), (Names{"block.bn2", "block.shortcut.1"}));
  EXPECT_EQ(incoming(a, "block.shortcut.0"), (Names{"relu"}));
  EXPECT_EQ(incoming(a, "block.conv1"), (Names{"relu"}));
  EXPECT_EQ(layer(a, "block.bn1").kind, "BatchNorm2d");
  EXPECT_EQ(layer(a, "block.bn1").parameters,
            (Names{"block.bn1.weight", "block.bn1.bias", "block.bn1.running_mean", "block.bn1.running_var"}));
  EXPECT_EQ(snap->optimizer_state.count("block.conv1.weight"), 1u);
}

// --- the upstream LibTorch MNIST network ---

struct MnistNetImpl : torch::nn::Module {
  MnistNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 5)))),
        conv2_drop(register_module("conv2_drop", torch::nn::Dropout2d())),
        fc1(register_module("fc1", torch::nn::Linear(8 * 4 * 4, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 8 * 4 * 4});
    return torch::log_softmax(fc1->forward(x), 1);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
};
TORCH_MODULE(MnistNet);

TEST(TracerModels, ARegisteredParameterlessModuleKeepsItsName) {
  MnistNet model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto data = test::make_batches(2, 4, {1, 28, 28});
  std::vector<int64_t> metric_batches;
  auto snap = capture_first(model.ptr(), data, [&](test::Batch& b) {
    opt.zero_grad();
    auto out = model->forward(b.first);
    auto loss = torch::nll_loss(out, b.second);
    loss.backward();
    opt.step();
    // Metrics on the outputs after the step are not the model.
    auto probabilities = torch::softmax(out.detach(), 1);
    metric_batches.push_back(probabilities.argmax(1).eq(b.second).sum().item<int64_t>());
  });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;
  EXPECT_EQ(shown(a), (Names{"input", "conv1", "max_pool2d", "relu", "conv2", "conv2_drop", "max_pool2d_1", "relu_1",
                             "fc1", "log_softmax"}));
  EXPECT_EQ(layer(a, "conv2_drop").kind, "Dropout2d");
  EXPECT_EQ(layer(a, "conv2_drop").role, LayerInfo::Role::kModule);
  EXPECT_EQ(layer(a, "conv2_drop").ops, (Names{"feature_dropout"}));
  EXPECT_EQ(shape_ops(a), (Names{"view"}));
  EXPECT_EQ(incoming(a, "fc1"), (Names{"view"}));
}

// --- a GAN: one parent module, two optimizers, three discriminator calls ---

struct GanImpl : torch::nn::Module {
  GanImpl()
      : G(register_module("G", torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(),
                                                     torch::nn::Linear(8, 6), torch::nn::Tanh()))),
        D(register_module("D", torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::LeakyReLU(),
                                                     torch::nn::Linear(8, 1), torch::nn::Sigmoid()))) {}
  torch::nn::Sequential G, D;
};
TORCH_MODULE(Gan);

// One GAN step: the discriminator on real then fake data, its step, then the
// generator through it (a third discriminator call) and its step.
void gan_step(Gan& gan, torch::optim::Optimizer& d_opt, torch::optim::Optimizer& g_opt, const torch::Tensor& x) {
  auto noise = torch::randn({5, 4});
  d_opt.zero_grad();
  auto real_out = gan->D->forward(x);
  auto fake = gan->G->forward(noise);
  auto fake_out = gan->D->forward(fake.detach());
  auto d_loss = torch::binary_cross_entropy(real_out, torch::ones_like(real_out)) +
                torch::binary_cross_entropy(fake_out, torch::zeros_like(fake_out));
  d_loss.backward();
  d_opt.step();
  g_opt.zero_grad();
  auto g_out = gan->D->forward(fake);
  torch::binary_cross_entropy(g_out, torch::ones_like(g_out)).backward();
  g_opt.step();
}

TEST(TracerModels, EveryForwardOfAGanBatchIsCapturedWithBothOptimizers) {
  Gan gan;
  torch::optim::Adam d_opt(gan->D->parameters(), 1e-3);
  torch::optim::Adam g_opt(gan->G->parameters(), 1e-3);
  std::vector<torch::Tensor> real;
  for (int i = 0; i < 2; ++i) real.push_back(torch::randn({5, 6}));
  auto snap = capture_first(
      gan.ptr(), real, [&](torch::Tensor& x) { gan_step(gan, d_opt, g_opt, x); },
      StartOptions().optimizers({&d_opt, &g_opt}));
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;
  EXPECT_EQ(shown(a), (Names{"input", "D.0", "D.1", "D.2", "D.3", "G.0", "G.1", "G.2", "G.3", "D.0#2", "D.1#2", "D.2#2",
                             "D.3#2", "D.0#3", "D.1#3", "D.2#3", "D.3#3"}));
  EXPECT_EQ(incoming(a, "D.0"), (Names{"input"})) << "the real-data path";
  EXPECT_EQ(incoming(a, "D.0#2"), (Names{"G.3"}));
  EXPECT_EQ(incoming(a, "D.0#3"), (Names{"G.3"}));
  EXPECT_EQ(layer(a, "D.1#2").kind, "LeakyReLU");
  EXPECT_EQ(layer(a, "D.0#3").module, "D.0");
  // Each call's activation and gradient: the discriminator's backward on fake
  // data and the generator's backward through it.
  for (const auto& n : {"D.0", "D.0#2", "D.0#3", "G.3"}) {
    EXPECT_TRUE(snap->activations.count(n)) << n;
    EXPECT_TRUE(snap->activation_gradients.count(n)) << n;
  }
  EXPECT_FALSE(torch::equal(snap->activations.at("D.3"), snap->activations.at("D.3#2")));
  // Each parameter shows the state of the optimizer that holds it.
  ASSERT_TRUE(snap->optimizer_state.count("D.0.weight"));
  ASSERT_TRUE(snap->optimizer_state.count("G.0.weight"));
  EXPECT_TRUE(snap->optimizer_state.at("G.0.weight").count("exp_avg"));
  EXPECT_EQ(snap->optimizer_state.at("D.0.weight").at("step").item<int64_t>(), 1);
  EXPECT_EQ(snap->optimizer_hyperparams.at("G.2.bias").at("lr"), 1e-3);
}

// Batches only collected: the discriminator call after the first backward
// pass is traced too, and its statistics collected on every batch.
TEST(TracerModels, AGansCallAfterABackwardPassIsCollectedOnEveryBatch) {
  torch::manual_seed(3);
  Gan gan;
  torch::optim::Adam d_opt(gan->D->parameters(), 1e-3);
  torch::optim::Adam g_opt(gan->G->parameters(), 1e-3);
  std::vector<torch::Tensor> real;
  for (int i = 0; i < 3; ++i) real.push_back(torch::randn({5, 6}));
  auto session = start(gan, StartOptions().optimizers({&d_opt, &g_opt}).stats_scope(StatsScope::kAll));
  session.detach();
  for (auto& x : session.batches(real, "train")) gan_step(gan, d_opt, g_opt, x);
  session.close();
  const auto stats = session.watch_snapshot();
  ASSERT_TRUE(stats);
  for (const std::string name : {"D.0", "D.0#2", "D.0#3", "D.3#3", "G.3"}) {
    const auto it = stats->layers.find({name, "train"});
    ASSERT_NE(it, stats->layers.end()) << name;
    ASSERT_EQ(it->second.size(), 1u) << name;
    EXPECT_EQ(it->second[0].batches, 3) << name;
    ASSERT_TRUE(it->second[0].activation) << name;
    ASSERT_TRUE(it->second[0].gradient) << name;
    EXPECT_EQ(it->second[0].gradient->n, it->second[0].activation->n) << name;
  }
}

// --- LibTorch's own multi-op modules: MultiheadAttention, LSTM, GRU ---

struct Recurrent : torch::nn::Module {
  Recurrent()
      : attention(register_module("attention", torch::nn::MultiheadAttention(8, 2))),
        lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(8, 8).num_layers(2)))),
        gru(register_module("gru", torch::nn::GRU(8, 8))),
        head(register_module("head", torch::nn::Linear(8, 3))) {}
  // x [T, B, 8]
  torch::Tensor forward(const torch::Tensor& x) {
    auto a = std::get<0>(attention(x, x, x));
    auto l = std::get<0>(lstm(a));
    auto g = std::get<0>(gru(l));
    return head(g.select(0, -1));
  }
  torch::nn::MultiheadAttention attention;
  torch::nn::LSTM lstm;
  torch::nn::GRU gru;
  torch::nn::Linear head;
};

TEST(TracerModels, MultiheadAttentionLstmAndGruAreOneLayerEach) {
  auto model = std::make_shared<Recurrent>();
  torch::optim::SGD opt(model->parameters(), 0.01);
  std::vector<test::Batch> data;
  for (int i = 0; i < 2; ++i) data.emplace_back(torch::randn({5, 4, 8}), torch::randint(3, {4}));
  auto snap = capture_first(model, data, [&](test::Batch& b) {
    opt.zero_grad();
    torch::cross_entropy_loss(model->forward(b.first), b.second).backward();
    opt.step();
  });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;
  Names modules, all = shown(a);
  for (const auto& l : a.layers) {
    if (l.role == LayerInfo::Role::kModule) modules.push_back(l.name);
  }
  EXPECT_EQ(modules, (Names{"attention", "attention.out_proj", "lstm", "gru", "head"})) << testing::PrintToString(all);
  for (const auto& n : all) {
    EXPECT_TRUE(n == "input" || n == "head" || n.rfind("attention", 0) == 0 || n == "lstm" || n == "gru")
        << n << " is outside every module call";
  }
  EXPECT_EQ(layer(a, "lstm").kind, "LSTM");
  EXPECT_EQ(layer(a, "lstm").output_shape, (std::vector<int64_t>{5, 4, 8}));
  EXPECT_EQ(incoming(a, "gru"), (Names{"lstm"}));
}

}  // namespace
}  // namespace nansense
