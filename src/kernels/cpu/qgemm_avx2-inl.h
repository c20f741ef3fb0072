// Internal: the avx2 quantized GEMM (qgemm.h), included twice by qgemm_avx2.cc: with TS_Q_VNNI = 1 (vpdpbusd on
// ymm, AVX-VNNI) and 0 (its exact emulation on vpmaddubsw + vpmaddwd). A 16-output group is two 8-lane halves;
// with 16 ymm registers the weights of one half are unpacked once per block and reused by every row of the tile.
// Expects TS_Q_NS (namespace), TS_Q_TARGET (attribute) and TS_Q_VNNI (0 or 1).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/qgemm.h"

namespace ts::kernels::cpu::TS_Q_NS {
namespace {

// Software prefetch distance of the weight stream, read by each group's first row tile (the later tiles find the
// group in L1/L2). A prefetch past the end of the buffer is harmless (it never faults).
constexpr size_t kPrefetchBytes = 2048;
constexpr int kMaxTileRows = 4;

TS_Q_TARGET inline __m256i broadcast_quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Exact sum of 4 unsigned x signed byte products per int32 lane, added to s (u <= 128 without VNNI).
TS_Q_TARGET inline __m256i dot_quads(__m256i s, __m256i u, __m256i x) {
#if TS_Q_VNNI
  return _mm256_dpbusd_avx_epi32(s, u, x);
#else
  const __m256i pairs = _mm256_maddubs_epi16(u, x);
  return _mm256_add_epi32(s, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

template <QuantType kT, int R>
TS_Q_TARGET void tile(const QuantizedRows& a, int row0, int in_features, const uint8_t* group, int nb, float* y,
                      int ldy, int valid_lanes, bool prefetch) {
  constexpr size_t kGroupBlockBytes = kT == QuantType::Q8_0 ? 544 : 288;
  __m256 acc[R][2];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int8_t* xq0 = a.q.data() + size_t(row0) * in_features;
  const float* dx0 = a.d.data() + size_t(row0) * nb;
  const int32_t* sum0 = a.sum.data() + size_t(row0) * nb;
  for (int b = 0; b < nb; ++b) {
    const uint8_t* blk = group + size_t(b) * kGroupBlockBytes;
    if (prefetch) {  // the weight stream kPrefetchBytes ahead (into the next groups at the end of this one)
      #pragma GCC unroll 8
      for (size_t line = 0; line < kGroupBlockBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes + line), _MM_HINT_T0);
    }
    #pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7 of the group
      const __m256 wscale = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
      __m256i w[8];           // k = 4j..4j+3 per lane, as uint8
      [[maybe_unused]] __m256i sign[8];  // Q8_0 without VNNI: the signed weights, whose signs go onto x
      if constexpr (kT == QuantType::Q8_0) {
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          w[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 64 * j + 32 * h));
#if !TS_Q_VNNI
          sign[j] = _mm256_xor_si256(w[j], _mm256_set1_epi8(char(0x80)));
          w[j] = _mm256_abs_epi8(sign[j]);
#endif
        }
      } else {
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        #pragma GCC unroll 8
        for (int j = 0; j < 4; ++j) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 64 * j + 32 * h));
          w[j] = _mm256_and_si256(v, low4);
          w[j + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        }
      }
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = xq0 + size_t(r) * in_features + b * kQBlock;
        __m256i s = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          __m256i x = broadcast_quad(xq + 4 * j);
#if !TS_Q_VNNI
          if constexpr (kT == QuantType::Q8_0) x = _mm256_sign_epi8(x, sign[j]);
#endif
          s = dot_quads(s, w[j], x);
        }
        constexpr int kOffset = kT == QuantType::Q8_0 ? (TS_Q_VNNI ? 128 : 0) : 8;
        if constexpr (kOffset != 0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(kOffset * sum0[size_t(r) * nb + b]));
        const __m256 scale = _mm256_mul_ps(wscale, _mm256_set1_ps(dx0[size_t(r) * nb + b]));
        acc[r][h] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s), acc[r][h]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (valid_lanes >= 16) {
      _mm256_storeu_ps(y + size_t(r) * ldy, acc[r][0]);
      _mm256_storeu_ps(y + size_t(r) * ldy + 8, acc[r][1]);
    } else {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, acc[r][0]);
      _mm256_store_ps(tmp + 8, acc[r][1]);
      std::memcpy(y + size_t(r) * ldy, tmp, sizeof(float) * valid_lanes);
    }
  }
}

template <QuantType kT>
TS_Q_TARGET void groups(const QuantizedRows& a, const uint8_t* packed, float* y, int out_features, int in_features,
                        int group_begin, int group_end) {
  const int nb = in_features / kQBlock;
  const size_t gb = qgemm_group_block_bytes(kT);
  for (int g = group_begin; g < group_end; ++g) {
    const uint8_t* group = packed + size_t(g) * nb * gb;
    const int valid = std::min(kQGroup, out_features - g * kQGroup);
    float* yg = y + g * kQGroup;
    for (int row0 = 0; row0 < a.rows; row0 += kMaxTileRows) {
      float* yt = yg + size_t(row0) * out_features;
      switch (std::min(kMaxTileRows, a.rows - row0)) {
        case 1: tile<kT, 1>(a, row0, in_features, group, nb, yt, out_features, valid, row0 == 0); break;
        case 2: tile<kT, 2>(a, row0, in_features, group, nb, yt, out_features, valid, row0 == 0); break;
        case 3: tile<kT, 3>(a, row0, in_features, group, nb, yt, out_features, valid, row0 == 0); break;
        default: tile<kT, 4>(a, row0, in_features, group, nb, yt, out_features, valid, row0 == 0); break;
      }
    }
  }
}

}  // namespace

void run_groups(QuantType t, const QuantizedRows& a, const uint8_t* packed, float* y, int out_features,
                int in_features, int group_begin, int group_end) {
  if (t == QuantType::Q8_0) return groups<QuantType::Q8_0>(a, packed, y, out_features, in_features, group_begin, group_end);
  groups<QuantType::Q4_0>(a, packed, y, out_features, in_features, group_begin, group_end);
}

}  // namespace ts::kernels::cpu::TS_Q_NS
