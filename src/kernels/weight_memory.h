// Memory for packed weights, backed by transparent huge pages where the kernel allows it.
//
// Why: a decode step streams every weight once, and on 4 KiB pages that is one TLB miss (a page walk) per 4 KiB read,
// which the hardware prefetchers do not cross. On 2 MiB pages the same stream reads faster
// (docs/results/optimization-notes.md, "Weights on transparent huge pages"). Debian's default THP mode is "madvise", so
// the pages must be asked for (MADV_HUGEPAGE).
//
// A huge page is 2 MiB, so giving each matrix its own mapping would waste up to 2 MiB per matrix (a 0.5B model's
// 4-6 MiB projections would grow 15%). Small blocks are therefore carved out of shared 64 MiB arenas, 64-byte
// aligned, and an arena is unmapped when its last block is freed; blocks over 16 MiB get their own mapping.
// TREESPARK_HUGEPAGES=0 turns the advice off (for side-by-side benchmarks).
#pragma once

#include <cstddef>
#include <memory>

namespace ts::kernels {

struct WeightBlockDeleter {
  void operator()(void* p) const;
};
using WeightBlock = std::unique_ptr<void, WeightBlockDeleter>;

// `bytes` of zero-initialised, 64-byte aligned memory. Throws ts::Error when the system has none left.
WeightBlock allocate_weight_block(size_t bytes);

// "on", "off (TREESPARK_HUGEPAGES=0)" or "unavailable (THP never)": what allocate_weight_block does here.
const char* weight_hugepages_state();

}  // namespace ts::kernels
