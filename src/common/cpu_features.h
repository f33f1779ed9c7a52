// Code built twice, for the baseline and with __attribute__((target("avx2"))),
// picks its build at run time by what the CPU runs. NANSENSE_AVX2_BUILDS is
// defined where the compiler can build such code (GCC or Clang, x86-64).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define NANSENSE_AVX2_BUILDS 1
#endif

namespace nansense::common {

// Whether this CPU runs AVX2 (asked once); false where nothing is built for it.
inline bool cpu_has_avx2() {
#if defined(NANSENSE_AVX2_BUILDS)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

}  // namespace nansense::common
