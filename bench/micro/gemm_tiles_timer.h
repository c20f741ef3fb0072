// Shared by bench_gemm_tiles*.cc: times candidate GEMM register tiles (gemm-inl.h's tile_bf16) over one 64-column
// group whose weights sit in L1 or L2: no memory stream, no threads, so a tile's MAC/ns is its arithmetic alone.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace ts::bench_tiles {

// The signature of gemm-inl.h's TileFn<uint16_t> (the same type in every ISA namespace).
using BF16TileFn = void (*)(const float*, int, const uint16_t*, int, float*, int, int, bool, const char*, int, int,
                            bool);

struct Candidate {
  const char* name;
  int rows, panels;
  BF16TileFn fn, rest;  // rest: the group's last pass when `panels` does not divide the group's panels
};

// Best of 15 interleaved rounds per candidate; prints useful MAC/ns. group_panels x lanes = 64 columns.
inline void time_tiles(const char* isa, int group_panels, int lanes, const Candidate* candidates, int count,
                       int pairs) {
  constexpr int kGroupCols = 64, kMaxRows = 16;
  std::vector<uint16_t> w(size_t(pairs) * kGroupCols * 2 + 4096);  // [pairs][64 cols][2] bf16 + slack
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint16_t(0x3f80 + i % 7);
  std::vector<float> x(size_t(kMaxRows) * pairs * 2, 0.5f);  // [16 rows][2 pairs] bf16 values as f32
  std::vector<float> y(size_t(kMaxRows) * kGroupCols);       // [16 rows][64 cols]
  std::vector<double> best_ns(count, 1e30);
  for (int round = 0; round < 15; ++round)
    for (int c = 0; c < count; ++c) {
      const Candidate& t = candidates[c];
      const int calls = std::max(1, 200000 / pairs);
      const auto t0 = std::chrono::steady_clock::now();
      for (int call = 0; call < calls; ++call)
        for (int p0 = 0; p0 < group_panels; p0 += t.panels)
          (t.rest && p0 + t.panels > group_panels ? t.rest : t.fn)(
              x.data(), pairs * 2, w.data() + p0 * lanes * 2, pairs, y.data() + p0 * lanes, kGroupCols,
              kGroupCols - p0 * lanes, call == 0, nullptr, 0, 0, false);
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      best_ns[c] = std::min(best_ns[c], ns / calls);
    }
  std::printf("%s bf16 tiles, one 64-column group, %d k pairs per call (%d KiB of weights); MAC/ns, best of 15\n", isa,
              pairs, pairs * kGroupCols * 4 / 1024);
  for (int c = 0; c < count; ++c) {
    const Candidate& t = candidates[c];
    const int passes = (group_panels + t.panels - 1) / t.panels;
    const int computed = t.rest ? group_panels : passes * t.panels;  // panels of work per group, wasted ones included
    const double useful_macs = double(t.rows) * kGroupCols * pairs * 2;
    std::printf("  %-28s %5.1f MAC/ns%s\n", t.name, useful_macs / best_ns[c],
                computed > group_panels ? " (computes panels past the group: not usable as is)" : "");
  }
}

}  // namespace ts::bench_tiles
