// A shared_ptr published by one thread and read by others, swapped whole
// (the snapshot pattern). Only load() and store(): a mutex around the
// pointer, held for a pointer copy or swap, never while an old value is
// released.
//
// Not std::atomic<std::shared_ptr<T>>: libstdc++ 12's load() takes the
// pointer's lock bit with an acquire but drops it with a relaxed RMW, so
// the reader's copy of the pointer is not ordered before the next store's
// write — a data race by the memory model, which ThreadSanitizer reports in
// every test that reads a snapshot while training publishes one
// (google/sanitizers#1558). libc++ and GCC 11's libstdc++ (which
// scripts/build-clang compiles against) lack it altogether.
#pragma once

#include <memory>
#include <mutex>
#include <utility>

namespace nansense::common {

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

}  // namespace nansense::common
