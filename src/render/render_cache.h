// A small thread-safe LRU of encoded images, keyed by what produced them
// (snapshot sequence, layer, kind, sample, options), so repeated views of the
// same pause cost one render.
#pragma once

#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace nansense::render {

template <class Value>
class RenderCache {
 public:
  explicit RenderCache(size_t capacity) : capacity_(capacity) {}

  std::shared_ptr<const Value> find(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  // The cached value, or `compute()`'s, computed once however many threads ask
  // for the same key at the same time (a page and a pre-render, two tabs).
  // An exception reaches every caller waiting on it and caches nothing.
  std::shared_ptr<const Value> get_or_compute(const std::string& key,
                                              const std::function<std::shared_ptr<const Value>()>& compute) {
    std::shared_future<std::shared_ptr<const Value>> pending;
    std::promise<std::shared_ptr<const Value>> mine;
    {
      std::lock_guard lock(mu_);
      if (auto it = index_.find(key); it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
      if (auto it = in_flight_.find(key); it != in_flight_.end()) {
        pending = it->second;
      } else {
        in_flight_.emplace(key, mine.get_future().share());
      }
    }
    if (pending.valid()) return pending.get();
    try {
      auto value = compute();
      put(key, value);
      mine.set_value(value);
      std::lock_guard lock(mu_);
      in_flight_.erase(key);
      return value;
    } catch (...) {
      mine.set_exception(std::current_exception());
      std::lock_guard lock(mu_);
      in_flight_.erase(key);
      throw;
    }
  }

  void put(const std::string& key, std::shared_ptr<const Value> value) {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return order_.size();
  }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Value>>;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> order_;
  std::unordered_map<std::string, typename std::list<Entry>::iterator> index_;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const Value>>> in_flight_;
};

}  // namespace nansense::render
