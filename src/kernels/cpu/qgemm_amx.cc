// The amx quantized GEMM: each 32-value block's integer sums for a row tile (up to 16 rows) and a 16-output group
// come from one AMX tile product, and the f32 work that follows is the avx512 tiles' own (qgemm.h, qgemm_k.h: the
// same operations in the same order on the same exact integer sums, so the same bits).
//
// Why: a tree of 12-16 rows is compute-bound on vpdpbusd: per row and block a Q8_0 / Q4_0 / Q4_K tile issues 8
// dot products and 2-3 f32 operations on the same two vector pipes. Here one tile product does the 8 dot products
// of every row, and the vector pipes keep the f32 part (docs/results/optimization-notes.md, "AMX-INT8 quantized
// GEMM").
//
// Tiles, per block b (one 32-value activation block, one weight block of the group):
//   A (tmm4 / tmm5): rows x 32 int8, the activations straight from QuantizedRows (row stride in_features bytes).
//   B (tmm6 / tmm7): 8 rows x 64 bytes: row j holds, for each of the 16 outputs, the 4 weights of k = 4j..4j+3,
//     written kSplitAhead blocks ahead into a ring of 512-byte slots (or, for a call's later row tiles, read back
//     from the first's: BSplit): Q8_0's packed w + 128 back to signed w, Q4_0's
//     nibbles split into bytes less 8 (row j < 4 the low nibbles of quad j, row 4 + j its high ones), so both use
//     tdpbssd and need no offset correction; Q4_K's nibbles split the same way but unsigned (tdpbsud).
//   C (tmm0-3, one per block mod 4): rows x 16 int32, zeroed per block: the block's exact integer sums, stored to
//     memory one step before the f32 step reads them.
// A step issues block b + 3's product, stores block b + 1's sums and runs block b's f32 work, so three products are
// in flight; the steps run through the blocks of kChunkGroups groups in a row before the pipeline drains. Row tiles
// below kMinAmxRows rows run the avx512-vnni tiles (the same bits); so does Q6_K (16-value halves), always.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/cpu/qgemm_k.h"

// GCC 12's _mm512_cvt* intrinsics trip a false (maybe-)uninitialized warning in its headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TS_Q_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni,amx-tile,amx-int8")))

// The tile's helpers inline into it, so its accumulators stay in registers.
#define TS_INLINE __attribute__((always_inline)) inline

namespace ts::kernels::cpu::amx_int8 {
namespace {

#include "kernels/cpu/qgemm_k_avx512_shared-inl.h"
#include "kernels/cpu/qgemm_k_prefetch-inl.h"

constexpr int kTileRows = 16;  // rows of A and C per tile
// Rows of a tile below this run the avx512-vnni tiles instead: a tile product's issue, its sums' store and read-back
// cost about as much whatever the rows, and below 12 rows the vnni tiles were as fast or faster (bench_linear,
// docs/results/optimization-notes.md, "AMX-INT8 quantized GEMM").
constexpr int kMinAmxRows = 12;

using TileConfig = AmxTileConfig;

TileConfig make_config(int rows) {
  TileConfig c;
  for (int t = 0; t < 4; ++t) c.colsb[t] = 64, c.rows[t] = uint8_t(rows);      // C: rows x 16 int32
  for (int t = 4; t < 6; ++t) c.colsb[t] = kQBlock, c.rows[t] = uint8_t(rows);  // A: rows x 32 int8
  for (int t = 6; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = kQBlock / 4;         // B: 8 x 64 bytes
  return c;
}

// What a tile reads besides the weights.
struct Rows {
  const int8_t* q;      // [rows, in_features] from the tile's first row
  const float* dx;      // [rows, nb]
  const float* dsum;    // [rows, nb] (Q4_K's min term)
  int in_features, nb;
};

// B's 512 bytes of a block, as signed weights (Q8_0, Q4_0: the offsets removed) or Q4_K's unsigned nibbles.
// Q8_0: 8 rows of w + 128 -> w. Q4_0 / Q4_K: the 256 bytes of 4 nibble quads -> low nibbles, then high nibbles
// (less 8 for Q4_0).
template <QuantType kT>
TS_Q_TARGET TS_INLINE void weight_bytes(const uint8_t* quants, uint8_t* b) {
  if constexpr (kT == QuantType::Q8_0) {
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      _mm512_store_si512(b + 64 * j,
                         _mm512_xor_si512(_mm512_loadu_si512(quants + 64 * j), _mm512_set1_epi8(char(0x80))));
    return;
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i offset = _mm512_set1_epi8(kT == QuantType::Q4_0 ? 8 : 0);
  #pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_loadu_si512(quants + 64 * j);
    _mm512_store_si512(b + 64 * j, _mm512_sub_epi8(_mm512_and_si512(v, low4), offset));
    _mm512_store_si512(b + 256 + 64 * j, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), offset));
  }
}

// B's bytes are prepared kSplitAhead blocks ahead of their step, in a ring of kRing slots (kRing > kSplitAhead: a
// slot is rewritten only after the tile load that read it).
constexpr int kSplitAhead = 7, kRing = 8;

template <QuantType kT>
constexpr size_t kBlockStride = qgemm_group_block_bytes(kT);  // bytes per group block (Q8_0 / Q4_0)

// The weights of block t, counted over consecutive groups of nb blocks from `groups`: Q4_K's 8 blocks of a
// super-block are 256-byte sub-blocks after its 256 bytes of scales; Q8_0 / Q4_0 as qgemm_quants_offset places
// them in their group (kBlockStride bytes a block).
template <QuantType kT>
TS_Q_TARGET inline const uint8_t* block_quants(const uint8_t* groups, int nb, int t) {
  if constexpr (kT == QuantType::Q4_K)
    return groups + size_t(t / kQBlocksPerSuper) * kQ4KGroupSuperBytes + 256 + 256 * (t % kQBlocksPerSuper);
  if constexpr (kT == QuantType::Q8_0) return groups + size_t(t) * kBlockStride<kT> + 32;
  const int b = t % nb;  // in its group
  return groups + size_t(t - b) * kBlockStride<kT> + qgemm_quants_offset(kT, nb, b);
}

// Block t's weight bytes into b_bytes (its ring or chunk slot, BSplit), and the weight stream prefetched ahead as
// the avx512 tiles read it (into the next groups at the end of this one).
template <QuantType kT>
TS_Q_TARGET TS_INLINE void prepare(const uint8_t* groups, int nb, int t, uint8_t* b_bytes, bool prefetch) {
  const uint8_t* quants = block_quants<kT>(groups, nb, t);
  if (prefetch) {
    if constexpr (kT == QuantType::Q4_K) {
      const uint8_t* sb = groups + size_t(t / kQBlocksPerSuper) * kQ4KGroupSuperBytes;
      prefetch_part<kQ4KGroupSuperBytes>(sb, t % kQBlocksPerSuper);
    } else {  // the stream's bytes kPrefetchBytes past where block t's begin
      const char* p = reinterpret_cast<const char*>(groups + size_t(t) * kBlockStride<kT> + 2048);
      #pragma GCC unroll 9
      for (size_t line = 0; line < kBlockStride<kT>; line += 64) _mm_prefetch(p + line, _MM_HINT_T0);
    }
  }
  weight_bytes<kT>(quants, b_bytes);
}

// Where B's bytes go and come from. A row tile alone splits them into its ring. Where a call has two or more AMX
// row tiles, the first splits each chunk's blocks into a chunk-sized buffer (block t at slot t) as it goes, and the
// others read them from there instead of splitting them again (Q4_0 and Q4_K; 32-128 rows 3-15% faster:
// docs/benchmarks.md, Xeon family 6 model 167, 2026-12-07).
enum class BSplit { kRing, kIntoChunk, kFromChunk };

template <BSplit kS>
TS_Q_TARGET TS_INLINE uint8_t* b_slot(uint8_t (*b)[512], int t) {
  return kS == BSplit::kRing ? b[t % kRing] : b[t];
}

// Starts block t's product in C tile kC (A and B: tmm4 + kC % 2, tmm6 + kC % 2); ab: its activation block.
template <QuantType kT, int kC, BSplit kS>
TS_Q_TARGET TS_INLINE void issue(const Rows& x, int t, int ab, uint8_t (*b_bytes)[512]) {
  const int8_t* a = x.q + size_t(ab) * kQBlock;
  const uint8_t* w = b_slot<kS>(b_bytes, t);
  __asm__ volatile("" ::: "memory");  // GCC's tile loads are asm that do not say they read memory
  // GCC's tile intrinsics paste the tile number into the instruction text: literals only.
#define TS_AMX_BLOCK(C, A, B)            \
  do {                                   \
    _tile_zero(C);                       \
    _tile_loadd(A, a, x.in_features);    \
    _tile_loadd(B, w, 64);               \
    if constexpr (kT == QuantType::Q4_K) \
      _tile_dpbsud(C, A, B);             \
    else                                 \
      _tile_dpbssd(C, A, B);             \
  } while (0)
  if constexpr (kC == 0) TS_AMX_BLOCK(0, 4, 6);
  if constexpr (kC == 1) TS_AMX_BLOCK(1, 5, 7);
  if constexpr (kC == 2) TS_AMX_BLOCK(2, 4, 6);
  if constexpr (kC == 3) TS_AMX_BLOCK(3, 5, 7);
#undef TS_AMX_BLOCK
}

// C tile kC -> c: [rows][16] int32.
template <int kC>
TS_Q_TARGET TS_INLINE void store_sums(int32_t* c) {
  if constexpr (kC == 0) _tile_stored(0, c, 64);
  if constexpr (kC == 1) _tile_stored(1, c, 64);
  if constexpr (kC == 2) _tile_stored(2, c, 64);
  if constexpr (kC == 3) _tile_stored(3, c, 64);
  __asm__ volatile("" ::: "memory");  // nor that they write it
}

// Q4_K's per-super-block state: its scales and mins as bytes (q4k_scale_bytes), read by its 8 blocks.
struct Q4KScales {
  alignas(64) uint8_t sc[128], mn[128];  // [8 j][16 lanes]
};

// Block t's f32 step for R rows (b: its activation block): c holds its integer sums [R][16].
template <QuantType kT, int R>
TS_Q_TARGET TS_INLINE void finish(const Rows& x, const uint8_t* groups, int t, int b, const int32_t* c,
                                  Q4KScales& k4, __m512 (&acc)[R]) {
  if constexpr (kT == QuantType::Q4_K) {
    const int j = b % kQBlocksPerSuper;
    const uint8_t* sb = groups + size_t(t / kQBlocksPerSuper) * kQ4KGroupSuperBytes;
    if (j == 0) q4k_scale_bytes(sb, k4.sc, k4.mn);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 32)));
    const __m512 ds = scale_16(d, k4.sc + 16 * j), dm = scale_16(dmin, k4.mn + 16 * j);  // d * sc_j, dmin * m_j
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(ds, _mm512_set1_ps(x.dx[size_t(r) * x.nb + b])), isum, acc[r]);
      acc[r] = _mm512_fnmadd_ps(dm, _mm512_set1_ps(x.dsum[size_t(r) * x.nb + b]), acc[r]);  // fma(-dm, dsum, acc)
    }
  } else {
    const uint8_t* scales = groups + size_t(t - b) * kBlockStride<kT> + qgemm_scales_offset(kT, x.nb, b);
    const __m512 wscale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i s = _mm512_load_si512(c + 16 * r);
      const __m512 scale = _mm512_mul_ps(wscale, _mm512_set1_ps(x.dx[size_t(r) * x.nb + b]));
      acc[r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s), acc[r]);
    }
  }
}

// Where a tile's outputs go: group g's 16 outputs of its R rows at y + 16 g (row stride ldy), the last group's
// first valid_last lanes only.
struct Out {
  float* y;
  int ldy, groups, valid_last;
};

// Block t's step (t % 4 == kPos; b = t mod nb, its activation block): prepare block t + kSplitAhead's weight bytes,
// issue block t + 3, store block t + 1's sums, then block t's f32 work on the sums stored one step earlier; after a
// group's last block, its outputs are stored and the accumulators restart. Four C tiles keep three products in
// flight, and a tile load reads weight bytes stored kSplitAhead - 3 steps earlier (a tile load right after the
// vector stores it reads waits for them to leave the store buffer). t runs over all the tile's groups at once (their
// blocks are contiguous in the packed weights), so the pipeline fills and drains once per call, not per group.
template <QuantType kT, int R, int kPos, BSplit kS>
TS_Q_TARGET TS_INLINE void step(const Rows& x, const uint8_t* groups, int t, int b, int total, uint8_t (*b_bytes)[512],
                                int32_t (*c_buf)[kTileRows * 16], Q4KScales& k4, __m512 (&acc)[R], bool prefetch,
                                const Out& out, int& g) {
  if (kS != BSplit::kFromChunk && t + kSplitAhead < total)
    prepare<kT>(groups, x.nb, t + kSplitAhead, b_slot<kS>(b_bytes, t + kSplitAhead), prefetch);
  if (t + 3 < total) {
    const int b3 = x.nb > 3 ? (b + 3 < x.nb ? b + 3 : b + 3 - x.nb) : (b + 3) % x.nb;  // block t + 3's
    issue<kT, (kPos + 3) % 4, kS>(x, t + 3, b3, b_bytes);
  }
  if (t + 1 < total) store_sums<(kPos + 1) % 4>(c_buf[(t + 1) % 2]);
  finish<kT, R>(x, groups, t, b, c_buf[t % 2], k4, acc);
  if (b == x.nb - 1) {
    const int valid = g == out.groups - 1 ? out.valid_last : kQGroup;
    const __mmask16 mask = valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1u);
    float* y = out.y + size_t(g) * kQGroup;
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(y + size_t(r) * out.ldy, mask, acc[r]);
      acc[r] = _mm512_setzero_ps();
    }
    ++g;
  }
}

// out.groups consecutive groups' 16 outputs each (from `groups`) for R rows. chunk: with kIntoChunk / kFromChunk,
// the groups' B bytes [block over the groups][512] (BSplit).
template <QuantType kT, int R, BSplit kS>
TS_Q_TARGET void tile(const Rows& x, const uint8_t* groups, const Out& out, bool prefetch, uint8_t (*chunk)[512]) {
  __m512 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  alignas(64) int32_t c_buf[2][kTileRows * 16];  // [block % 2][rows][16 outputs]
  alignas(64) uint8_t ring[kRing][512];          // [block % kRing]: B's bytes with kRing
  uint8_t (*b_bytes)[512] = kS == BSplit::kRing ? ring : chunk;
  Q4KScales k4;
  const int nb = x.nb, total = nb * out.groups;
  auto act = [nb](int t) { return t % nb; };  // prologue only
  if constexpr (kS != BSplit::kFromChunk)
    for (int t = 0; t < std::min(total, kSplitAhead); ++t) prepare<kT>(groups, nb, t, b_slot<kS>(b_bytes, t), prefetch);
  issue<kT, 0, kS>(x, 0, 0, b_bytes);
  if (total > 1) issue<kT, 1, kS>(x, 1, act(1), b_bytes);
  if (total > 2) issue<kT, 2, kS>(x, 2, act(2), b_bytes);
  store_sums<0>(c_buf[0]);
  int g = 0, b = 0;  // block t's group and activation block
  const auto next = [nb](int& b) { b = b + 1 < nb ? b + 1 : 0; };
  for (int t = 0; t < total; t += 4) {
    step<kT, R, 0, kS>(x, groups, t, b, total, b_bytes, c_buf, k4, acc, prefetch, out, g);
    next(b);
    if (t + 1 < total) step<kT, R, 1, kS>(x, groups, t + 1, b, total, b_bytes, c_buf, k4, acc, prefetch, out, g);
    next(b);
    if (t + 2 < total) step<kT, R, 2, kS>(x, groups, t + 2, b, total, b_bytes, c_buf, k4, acc, prefetch, out, g);
    next(b);
    if (t + 3 < total) step<kT, R, 3, kS>(x, groups, t + 3, b, total, b_bytes, c_buf, k4, acc, prefetch, out, g);
    next(b);
  }
}

// Groups one tile call runs through before its next row tile (or the vnni rows) reads them again: its pipeline
// fills and drains once per chunk, and a chunk's weights stay in L2 for the later row tiles (16 groups of a
// 2048-wide Q4_0 product: 295 KB; of a 6144-wide one: 884 KB). 16 beat 4 (optimization-notes.md, "AMX-INT8
// quantized GEMM").
constexpr int kChunkGroups = 16;

// Rows a tile-sized call runs on AMX: whole 16-row tiles, and the last tile when it has kMinAmxRows rows or more.
int amx_rows(int rows) {
  const int tail = rows % kTileRows;
  return tail >= kMinAmxRows ? rows : rows - tail;
}

// y for groups [group_begin, group_end): the first amx_rows(rows) rows on AMX tiles, the rest on the avx512-vnni
// tiles (vnni_rows), group by group so that both read the group while it is in cache.
template <QuantType kT, class VnniRows>
TS_Q_TARGET void groups(const QuantizedRows& a, const uint8_t* packed, float* y, int out_features, int in_features,
                        int group_begin, int group_end, VnniRows vnni_rows) {
  const int nb = in_features / kQBlock, tiled_rows = amx_rows(a.rows);
  const size_t group_bytes = qgemm_packed_bytes(kT, kQGroup, in_features);
  const TileConfig full = make_config(kTileRows), tail = make_config(std::max(1, tiled_rows % kTileRows));
  const TileConfig* loaded = nullptr;
  // Two or more row tiles share each chunk's split nibbles (BSplit). Q8_0's split, one xor per vector, is cheaper
  // than reading it back from a chunk-sized buffer (32 rows 8-20% slower when shared).
  const bool share_split = kT != QuantType::Q8_0 && tiled_rows > kTileRows;
  // [block over the chunk's groups][512] from a 64-byte boundary: 512 KB per thread for 2048 inputs, 1.5 MB for 6144
  thread_local std::vector<uint8_t> split;
  uint8_t (*chunk_b)[512] = nullptr;
  if (share_split) {
    split.resize(size_t(kChunkGroups) * nb * 512 + 64);
    const uintptr_t at = (reinterpret_cast<uintptr_t>(split.data()) + 63) & ~uintptr_t(63);
    chunk_b = reinterpret_cast<uint8_t (*)[512]>(at);
  }
  for (int g0 = group_begin; g0 < group_end; g0 += kChunkGroups) {
    const int g1 = std::min(group_end, g0 + kChunkGroups);
    const uint8_t* chunk = packed + size_t(g0) * group_bytes;
    for (int row0 = 0; row0 < tiled_rows; row0 += kTileRows) {
      const int rows = std::min(kTileRows, tiled_rows - row0);
      const TileConfig* want = rows == kTileRows ? &full : &tail;
      if (want != loaded) _tile_loadconfig(want), loaded = want;
      const Rows x{a.q.data() + size_t(row0) * in_features, a.d.data() + size_t(row0) * nb,
                   a.dsum.data() + size_t(row0) * nb, in_features, nb};
      const Out out{y + size_t(row0) * out_features + g0 * kQGroup, out_features, g1 - g0,
                    std::min(kQGroup, out_features - (g1 - 1) * kQGroup)};
      with_tile_rows<kTileRows>(rows, [&](auto r) {
        constexpr int R = decltype(r)::value;
        if (!share_split)
          tile<kT, R, BSplit::kRing>(x, chunk, out, row0 == 0, nullptr);
        else if (row0 == 0)
          tile<kT, R, BSplit::kIntoChunk>(x, chunk, out, true, chunk_b);
        else
          tile<kT, R, BSplit::kFromChunk>(x, chunk, out, false, chunk_b);
      });
    }
    if (tiled_rows < a.rows)
      for (int g = g0; g < g1; ++g) vnni_rows(tiled_rows, g);
  }
  if (loaded != nullptr) _tile_release();
}

}  // namespace

void run_groups(QuantType t, const QuantizedRows& a, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end) {
  if (amx_rows(a.rows) == 0)
    return avx512_vnni::run_groups(t, a, packed, y, out_features, in_features, group_begin, group_end);
  const auto vnni_rows = [&](int row_begin, int g) {
    avx512_vnni::run_rows(t, a, row_begin, a.rows, packed, y, out_features, in_features, g, g + 1);
  };
  if (t == QuantType::Q8_0)
    return groups<QuantType::Q8_0>(a, packed, y, out_features, in_features, group_begin, group_end, vnni_rows);
  groups<QuantType::Q4_0>(a, packed, y, out_features, in_features, group_begin, group_end, vnni_rows);
}

void run_groups_k(QuantType t, const QuantizedRows& a, const uint8_t* packed, float* y, int out_features,
                  int in_features, int group_begin, int group_end) {
  if (amx_rows(a.rows) == 0 || t != QuantType::Q4_K)
    return avx512k_vnni::run_groups_k(t, a, packed, y, out_features, in_features, group_begin, group_end);
  const auto vnni_rows = [&](int row_begin, int g) {
    avx512k_vnni::run_rows_k(t, a, row_begin, a.rows, packed, y, out_features, in_features, g, g + 1);
  };
  groups<QuantType::Q4_K>(a, packed, y, out_features, in_features, group_begin, group_end, vnni_rows);
}

}  // namespace ts::kernels::cpu::amx_int8
