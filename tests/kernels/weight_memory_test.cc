// Weight blocks: aligned, zeroed, disjoint, released, and (where THP can be asked for) advised huge.
#include "kernels/weight_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace ts::kernels {
namespace {

bool all_zero(const void* p, size_t bytes) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  return std::all_of(c, c + bytes, [](unsigned char v) { return v == 0; });
}

// The VmFlags line of the /proc/self/smaps entry that holds `p` ("" when none does).
std::string vm_flags_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(WeightMemory, BlocksAreAlignedZeroedAndDisjoint) {
  // Sizes around the arena's and the own-mapping threshold's edges, and odd ones.
  const std::vector<size_t> sizes = {1, 63, 64, 65, 4096, 1 << 20, (size_t(16) << 20) - 64, (size_t(16) << 20) + 1,
                                     3 << 20, 5 << 20, 7 << 20, 100, size_t(40) << 20};
  std::vector<std::pair<WeightBlock, size_t>> blocks;
  for (size_t bytes : sizes) {
    WeightBlock b = allocate_weight_block(bytes);
    ASSERT_NE(b.get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u) << bytes << " bytes";
    EXPECT_TRUE(all_zero(b.get(), bytes)) << bytes << " bytes";
    blocks.emplace_back(std::move(b), bytes);
  }
  // Fill each block with its own byte; none may overwrite another.
  for (size_t i = 0; i < blocks.size(); ++i) std::memset(blocks[i].first.get(), int(i + 1), blocks[i].second);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const unsigned char* c = static_cast<const unsigned char*>(blocks[i].first.get());
    const size_t bytes = blocks[i].second;
    EXPECT_EQ(c[0], i + 1);
    EXPECT_EQ(c[bytes - 1], i + 1) << "block " << i << " was overwritten by a later one";
  }
}

TEST(WeightMemory, FreedMemoryComesBackZeroed) {
  for (int round = 0; round < 3; ++round) {
    std::vector<WeightBlock> blocks;
    for (int i = 0; i < 40; ++i) {
      blocks.push_back(allocate_weight_block(size_t(3) << 20));  // fills more than one 64 MiB arena
      ASSERT_TRUE(all_zero(blocks.back().get(), size_t(3) << 20)) << "round " << round << " block " << i;
      std::memset(blocks.back().get(), 0xab, size_t(3) << 20);
    }
  }
}

TEST(WeightMemory, BlocksAreAdvisedHugeWhereTheSystemAllows) {
  const std::string state = weight_hugepages_state();
  WeightBlock small = allocate_weight_block(size_t(4) << 20);
  WeightBlock large = allocate_weight_block(size_t(20) << 20);
  const std::string small_flags = vm_flags_of(small.get()), large_flags = vm_flags_of(large.get());
  if (state.rfind("on", 0) != 0) {
    std::printf("huge pages %s: only checking that the blocks are mapped\n", state.c_str());
    EXPECT_FALSE(small_flags.empty());
    return;
  }
  // "hg": MADV_HUGEPAGE was applied to the mapping (proc(5)).
  EXPECT_NE(small_flags.find(" hg"), std::string::npos) << small_flags;
  EXPECT_NE(large_flags.find(" hg"), std::string::npos) << large_flags;
}

}  // namespace
}  // namespace ts::kernels
