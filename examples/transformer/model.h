// The transformer demo's network: a two-block encoder over token sequences,
// mean-pooled over the real (unpadded) tokens, then a linear head.
//
// Written the way LibTorch users write one, attention by hand. The submodule
// names are the layer names the debugger shows: "layers.0.attention.qkv" is the
// first block's q/k/v projection, "layers.1.ff2" the second block's
// feed-forward output.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>

// Token 0 is padding; a sequence shorter than the model's length is filled up
// with it.
inline constexpr int64_t kPadToken = 0;

// Multi-head self-attention over [B, T, D]; keys at padded positions get no
// weight.
struct SelfAttentionImpl : torch::nn::Module {
  SelfAttentionImpl(int64_t dim, int64_t heads)
      : qkv(register_module("qkv", torch::nn::Linear(dim, 3 * dim))),
        out(register_module("out", torch::nn::Linear(dim, dim))),
        heads(heads) {
    TORCH_CHECK(dim % heads == 0, "model dimension ", dim, " is not a multiple of ", heads, " heads");
  }

  // x [B, T, D]; pad [B, T], true where padded.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& pad) {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2), dh = D / heads;
    // One projection for all three, split per head: [3, B, heads, T, dh].
    auto parts = qkv(x).view({B, T, 3, heads, dh}).permute({2, 0, 3, 1, 4});
    auto q = parts.select(0, 0), k = parts.select(0, 1), v = parts.select(0, 2);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
    // A row whose keys are all padding is all -inf, and its softmax NaN: a
    // sample must keep at least one real token.
    scores = scores.masked_fill(pad.view({B, 1, 1, T}), -INFINITY);
    auto context = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({B, T, D});
    return out(context);
  }

  torch::nn::Linear qkv, out;
  int64_t heads;
};
TORCH_MODULE(SelfAttention);

// Post-norm encoder block, as in "Attention Is All You Need".
struct EncoderBlockImpl : torch::nn::Module {
  EncoderBlockImpl(int64_t dim, int64_t heads, int64_t ff_dim, double dropout_p)
      : attention(register_module("attention", SelfAttention(dim, heads))),
        norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        ff1(register_module("ff1", torch::nn::Linear(dim, ff_dim))),
        ff2(register_module("ff2", torch::nn::Linear(ff_dim, dim))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        dropout(register_module("dropout", torch::nn::Dropout(dropout_p))) {}

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& pad) {
    x = norm1(x + dropout(attention(x, pad)));
    return norm2(x + ff2(torch::gelu(ff1(x))));
  }

  SelfAttention attention;
  torch::nn::LayerNorm norm1;
  torch::nn::Linear ff1, ff2;
  torch::nn::LayerNorm norm2;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(EncoderBlock);

struct TextClassifierOptions {
  TORCH_ARG(int64_t, vocab) = 32;
  TORCH_ARG(int64_t, length) = 24;  // tokens per (padded) sequence
  TORCH_ARG(int64_t, dim) = 32;
  TORCH_ARG(int64_t, heads) = 4;
  TORCH_ARG(int64_t, ff_dim) = 64;
  TORCH_ARG(int64_t, blocks) = 2;
  TORCH_ARG(int64_t, classes) = 4;
  TORCH_ARG(double, dropout) = 0.1;
};

struct TextClassifierImpl : torch::nn::Module {
  explicit TextClassifierImpl(const TextClassifierOptions& o = {})
      : embed(register_module("embed", torch::nn::Embedding(o.vocab(), o.dim()))),
        position(register_module("position", torch::nn::Embedding(o.length(), o.dim()))),
        layers(register_module("layers", torch::nn::ModuleList())),
        head(register_module("head", torch::nn::Linear(o.dim(), o.classes()))) {
    for (int64_t i = 0; i < o.blocks(); ++i) {
      layers->push_back(EncoderBlock(o.dim(), o.heads(), o.ff_dim(), o.dropout()));
    }
  }

  // tokens [B, T] int64, kPadToken where padded -> logits [B, classes].
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto pad = tokens.eq(kPadToken);
    auto x = embed(tokens);
    x = x + position(torch::arange(tokens.size(1), tokens.options()));
    for (const auto& block : *layers) x = block->as<EncoderBlock>()->forward(x, pad);
    // The mean over each sample's real tokens.
    auto pooled = x.masked_fill(pad.unsqueeze(-1), 0).sum(1) / (~pad).sum(1, /*keepdim=*/true);
    return head(pooled);
  }

  torch::nn::Embedding embed, position;
  torch::nn::ModuleList layers;
  torch::nn::Linear head;
};
TORCH_MODULE(TextClassifier);
