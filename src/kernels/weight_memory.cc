#include "kernels/weight_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include "core/error.h"

namespace ts::kernels {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kArenaBytes = size_t(64) << 20;
constexpr size_t kOwnMappingOver = size_t(16) << 20;  // blocks larger than this get their own mapping
constexpr size_t kHeader = 64;                         // per block, just before it; keeps blocks 64-byte aligned

// One mapping: an arena shared by small blocks, or one large block's own.
struct Mapping {
  char* base = nullptr;  // 2 MiB aligned
  size_t bytes = 0;      // a multiple of 2 MiB
  size_t used = 0;       // bump offset (arenas)
  size_t live = 0;       // blocks not yet freed
};

struct Header {
  Mapping* mapping;
};
static_assert(sizeof(Header) <= kHeader);

bool advice_wanted() {
  const char* env = std::getenv("TREESPARK_HUGEPAGES");
  return env == nullptr || std::string(env) != "0";
}

bool thp_available() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;  // e.g. "always [madvise] never"
  if (!std::getline(f, modes)) return false;
  return modes.find("[never]") == std::string::npos;
}

// `bytes` (a multiple of 2 MiB) of anonymous memory starting on a 2 MiB boundary, so that every 2 MiB of it can be
// one huge page: map 2 MiB more than asked and unmap the unaligned head and tail.
char* map_aligned(size_t bytes) {
  void* raw = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TS_CHECK(raw != MAP_FAILED, "out of memory mapping ", bytes, " bytes of weights: ", std::strerror(errno));
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + bytes + kHugePage, aligned_end = aligned + bytes;
  if (end > aligned_end) munmap(reinterpret_cast<void*>(aligned_end), end - aligned_end);
  static const bool advise = advice_wanted() && thp_available();
  if (advise) madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
  return reinterpret_cast<char*>(aligned);
}

std::mutex g_mutex;
Mapping* g_arena = nullptr;  // the arena new small blocks come from (guarded by g_mutex)

void* place(Mapping* m, size_t offset) {
  reinterpret_cast<Header*>(m->base + offset)->mapping = m;
  m->live += 1;
  return m->base + offset + kHeader;
}

}  // namespace

WeightBlock allocate_weight_block(size_t bytes) {
  const size_t need = kHeader + (bytes + 63) / 64 * 64;
  if (need > kOwnMappingOver) {
    auto* m = new Mapping;
    m->bytes = (need + kHugePage - 1) / kHugePage * kHugePage;
    m->base = map_aligned(m->bytes);
    std::lock_guard<std::mutex> lock(g_mutex);
    return WeightBlock(place(m, 0));
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_arena == nullptr || g_arena->used + need > g_arena->bytes) {
    if (g_arena != nullptr && g_arena->live == 0) {
      munmap(g_arena->base, g_arena->bytes);
      delete g_arena;
    }
    g_arena = new Mapping;
    g_arena->bytes = kArenaBytes;
    g_arena->base = map_aligned(kArenaBytes);
  }
  void* block = place(g_arena, g_arena->used);
  g_arena->used += need;
  return WeightBlock(block);
}

void WeightBlockDeleter::operator()(void* p) const {
  if (p == nullptr) return;
  Mapping* m = reinterpret_cast<Header*>(static_cast<char*>(p) - kHeader)->mapping;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--m->live > 0) return;
  if (m == g_arena) {
    // The open arena, now empty: unmap it rather than reuse it, so every block starts zeroed.
    g_arena = nullptr;
  }
  munmap(m->base, m->bytes);
  delete m;
}

const char* weight_hugepages_state() {
  if (!advice_wanted()) return "off (TREESPARK_HUGEPAGES=0)";
  if (!thp_available()) return "unavailable (transparent huge pages: never)";
  return "on (MADV_HUGEPAGE)";
}

}  // namespace ts::kernels
