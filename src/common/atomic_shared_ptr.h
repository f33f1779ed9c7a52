// A shared_ptr published by one thread and read by others, swapped whole
// (the snapshot pattern): std::atomic<std::shared_ptr<T>> where the standard
// library has it (GCC 12's libstdc++), else a mutex around the pointer
// (libc++, and GCC 11's libstdc++, which scripts/build-clang compiles
// against for LibTorch 1.13). Only load() and store().
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <version>

namespace nansense::common {

#if defined(__cpp_lib_atomic_shared_ptr)
template <class T>
using AtomicSharedPtr = std::atomic<std::shared_ptr<T>>;
#else
template <class T>
class AtomicSharedPtr {
 public:
  std::shared_ptr<T> load() const {
    std::lock_guard lock(mu_);
    return ptr_;
  }
  void store(std::shared_ptr<T> ptr) {
    {
      std::lock_guard lock(mu_);
      ptr_.swap(ptr);
    }
    // The old value is released here, outside the lock.
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<T> ptr_;
};
#endif

}  // namespace nansense::common
