// A range adaptor that yields at most N items of another range (--limit-batches).
#pragma once

#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>

// Stops after `limit` items without advancing the inner iterator past the
// last one taken, so a data loader never loads a batch nobody uses.
// limit 0 means no limit. Works with session.batches(take, phase) like the
// range it wraps.
template <class Range>
class Take {
  using InnerIt = decltype(std::begin(std::declval<Range&>()));
  using InnerEnd = decltype(std::end(std::declval<Range&>()));

 public:
  struct sentinel {
    InnerEnd end;
  };

  class iterator {
   public:
    // torch's loader iterators dereference only when non-const, while range
    // adaptors (session.batches among them) dereference through const ones.
    decltype(auto) operator*() const { return *it_; }
    iterator& operator++() {
      if (--left_ > 0) ++it_;
      return *this;
    }
    friend bool operator==(const iterator& a, const sentinel& s) { return a.left_ == 0 || a.it_ == s.end; }

   private:
    friend class Take;
    iterator(InnerIt it, int64_t left) : it_(std::move(it)), left_(left) {}
    mutable InnerIt it_;
    int64_t left_;
  };

  Take(Range& range, int64_t limit) : range_(range), limit_(limit > 0 ? limit : std::numeric_limits<int64_t>::max()) {}

  iterator begin() { return iterator(std::begin(range_), limit_); }
  sentinel end() { return {std::end(range_)}; }

 private:
  Range& range_;
  int64_t limit_;
};
