// Every tensor of a batch item: what the flight recorder keeps for a NaN
// capsule and what replay_capsule() hands back.
#pragma once

#include <torch/data/example.h>
#include <torch/types.h>

#include <tuple>
#include <utility>
#include <vector>

#include "nansense/batch_traits.h"

namespace nansense {

// Customisation point, beside BatchTraits (which picks the model inputs):
// `all(item)` lists every tensor of the item in a fixed order (inputs and
// targets). Provided for torch::Tensor, torch::data::Example<> (data, target),
// std::vector of items, std::pair and std::tuple; any other type falls back to
// its BatchTraits inputs. The recorder keeps references, not copies.
template <class T, class = void>
struct ItemTensors {
  static std::vector<torch::Tensor> all(const T& item) { return BatchTraits<T>::inputs(item); }
};

namespace detail {
template <class T>
void append_item_tensors(const T& item, std::vector<torch::Tensor>& out) {
  auto part = ItemTensors<std::decay_t<T>>::all(item);
  out.insert(out.end(), part.begin(), part.end());
}
}  // namespace detail

template <>
struct ItemTensors<torch::Tensor> {
  static std::vector<torch::Tensor> all(const torch::Tensor& t) { return {t}; }
};

template <class Data, class Target>
struct ItemTensors<torch::data::Example<Data, Target>> {
  static std::vector<torch::Tensor> all(const torch::data::Example<Data, Target>& e) {
    std::vector<torch::Tensor> out;
    detail::append_item_tensors(e.data, out);
    if constexpr (!std::is_same_v<Target, torch::data::example::NoTarget>) detail::append_item_tensors(e.target, out);
    return out;
  }
};

template <class Item>
struct ItemTensors<std::vector<Item>> {
  static std::vector<torch::Tensor> all(const std::vector<Item>& items) {
    std::vector<torch::Tensor> out;
    for (const auto& item : items) detail::append_item_tensors(item, out);
    return out;
  }
};

template <class A, class B>
struct ItemTensors<std::pair<A, B>> {
  static std::vector<torch::Tensor> all(const std::pair<A, B>& p) {
    std::vector<torch::Tensor> out;
    detail::append_item_tensors(p.first, out);
    detail::append_item_tensors(p.second, out);
    return out;
  }
};

template <class... Ts>
struct ItemTensors<std::tuple<Ts...>> {
  static std::vector<torch::Tensor> all(const std::tuple<Ts...>& t) {
    std::vector<torch::Tensor> out;
    std::apply([&](const auto&... e) { (detail::append_item_tensors(e, out), ...); }, t);
    return out;
  }
};

}  // namespace nansense
