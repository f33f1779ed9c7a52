// The signed-log bins every histogram shares (the 211 of the original
// NaNsense 0.4.0, Python on PyPI): 7 bins per
// decade over |x| in 1e-9 .. 1e6 on each side, a zero band |x| < 1e-9 in the
// middle, and open end bins that take everything beyond +-1e6 (infinities
// included; the UI marks those bars as clipped).
//
//   bin 0 .. 104    negative values, most negative first
//   bin 105         the zero band (|x| < 1e-9)
//   bin 106 .. 210  positive values, smallest first
//
// Torch-free: the command descriptions and the page's generated constants
// (wire_types.cpp, HistogramBins) read the numbers from here.
#pragma once

#include <string>

namespace nansense::stats {

constexpr int kBinsPerDecade = 7;
constexpr int kDecades = 15;                          // 1e-9 .. 1e6
constexpr int kSideBins = kBinsPerDecade * kDecades;  // 105
constexpr int kZeroBin = kSideBins;                   // 105
constexpr int kBins = 2 * kSideBins + 1;              // 211
constexpr double kZeroBand = 1e-9;
constexpr double kTop = 1e6;

// "211 signed-log bins (7 per decade over 1e-9..1e6 on each side, a zero band
// |x| < 1e-9 in the middle)", for descriptions and captions.
inline std::string bins_description() {
  return std::to_string(kBins) + " signed-log bins (" + std::to_string(kBinsPerDecade) +
         " per decade over 1e-9..1e6 on each side, a zero band |x| < 1e-9 in the middle)";
}

}  // namespace nansense::stats
