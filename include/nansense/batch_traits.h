// How nansense finds the model inputs inside a loader's batch item.
#pragma once

#include <torch/data/example.h>
#include <torch/types.h>

#include <tuple>
#include <utility>
#include <vector>

namespace nansense {

// Customisation point: which tensors of a batch item are the model's inputs.
// They become the graph's input layers and the snapshot's input pane; any
// other tensor of the item (a target) is not part of the model.
//
// Provided for torch::Tensor, torch::data::Example<> (its data),
// std::vector<Example<>> (every example's data), std::pair (first) and
// std::tuple (all but the last element). For your own batch type, specialise:
//
//   template <> struct nansense::BatchTraits<MyBatch> {
//     static std::vector<torch::Tensor> inputs(const MyBatch& b) {
//       return {b.image, b.mask};
//     }
//   };
//
// Define `static constexpr bool kStacked = true;` when the tensors are one
// batch's examples that the model sees stacked (one input layer).
// A type with no specialisation still trains normally; its graph simply has no
// input layers.
template <class T, class = void>
struct BatchTraits {
  static std::vector<torch::Tensor> inputs(const T&) { return {}; }
};

template <>
struct BatchTraits<torch::Tensor> {
  static std::vector<torch::Tensor> inputs(const torch::Tensor& t) { return {t}; }
};

template <class Data, class Target>
struct BatchTraits<torch::data::Example<Data, Target>> {
  static std::vector<torch::Tensor> inputs(const torch::data::Example<Data, Target>& e) {
    if constexpr (std::is_same_v<Data, torch::Tensor>) {
      return {e.data};
    } else {
      return BatchTraits<Data>::inputs(e.data);
    }
  }
};

template <class Data, class Target>
struct BatchTraits<std::vector<torch::data::Example<Data, Target>>> {
  // The examples reach the model stacked: together they are one input layer.
  static constexpr bool kStacked = true;
  static std::vector<torch::Tensor> inputs(const std::vector<torch::data::Example<Data, Target>>& examples) {
    std::vector<torch::Tensor> out;
    for (const auto& e : examples) {
      auto part = BatchTraits<torch::data::Example<Data, Target>>::inputs(e);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
};

template <class A, class B>
struct BatchTraits<std::pair<A, B>> {
  static std::vector<torch::Tensor> inputs(const std::pair<A, B>& p) {
    return BatchTraits<std::decay_t<A>>::inputs(p.first);
  }
};

template <class... Ts>
struct BatchTraits<std::tuple<Ts...>> {
  static std::vector<torch::Tensor> inputs(const std::tuple<Ts...>& t) {
    std::vector<torch::Tensor> out;
    constexpr size_t n = sizeof...(Ts);
    // All but the last element; a 1-tuple is its only element.
    constexpr size_t take = n > 1 ? n - 1 : n;
    [&]<size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            auto part = BatchTraits<std::decay_t<std::tuple_element_t<I, std::tuple<Ts...>>>>::inputs(std::get<I>(t));
            out.insert(out.end(), part.begin(), part.end());
          }(),
          ...);
    }
    (std::make_index_sequence<take>{});
    return out;
  }
};

}  // namespace nansense
