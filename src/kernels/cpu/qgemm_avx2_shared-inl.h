// Internal: what the avx2 quantized GEMMs share (integer dot products, half-group stores), included inside the
// namespace of qgemm_avx2-inl.h and qgemm_k_avx2-inl.h (after <immintrin.h>, <algorithm> and <cstring>; once per
// namespace, so no include guard). Expects TS_Q_TARGET and TS_Q_VNNI.
//
// With AVX-VNNI one vpdpbusd adds 4 uint8 x int8 products per int32 lane. Without it, vpmaddubsw makes int16 pair
// sums and vpmaddwd (times 1) widens them: both issue on the same two multiply pipes, so widening every pair sum
// doubles the pipe work. Where the weights are small enough, pair sums are first added in int16 (exactly: the
// bounds below keep every partial sum inside int16) and widened once.

// The activation pointer a tile of R rows reads one 8-lane half through. From 2 rows it is hidden from the
// compiler: the tiles read a block's two halves through the same pointer, and GCC otherwise shares the broadcast
// activation quads between the halves, which keeps a tile's worth of them live across a half, and 16 ymm registers
// cannot hold them (it spilled and reloaded each). One row's 8 quads fit, and sharing them was faster there.
template <int R, typename T>
TS_Q_TARGET inline const T* activations_for_half(const T* p) {
  if constexpr (R > 1) asm volatile("" : "+r"(p));  // volatile: two identical plain asm statements may be merged
  return p;
}

TS_Q_TARGET inline __m256i broadcast_quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// s + the exact sum of 4 unsigned x signed byte products per int32 lane (u <= 128 without VNNI, so no pair sum
// saturates: |x| <= 127).
TS_Q_TARGET inline __m256i dot_quads(__m256i s, __m256i u, __m256i x) {
#if TS_Q_VNNI
  return _mm256_dpbusd_avx_epi32(s, u, x);
#else
  const __m256i pairs = _mm256_maddubs_epi16(u, x);
  __m256i sum = _mm256_add_epi32(s, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  asm("" : "+x"(sum));  // as in add_small_quad
  return sum;
#endif
}

// Products of small weights (0 <= u <= 63) summed per lane: with VNNI, s is an int32 quad sum and this is dot_quads;
// without, s holds int16 pair sums, added without widening. A caller adds at most 32767 / (2 * 127 * max u)
// quads per lane before widen_small_sums: 8 for 4-bit weights (8 * 3810 = 30480), 2 for 6-bit ones (2 * 16002).
TS_Q_TARGET inline __m256i add_small_quad(__m256i s, __m256i u, __m256i x) {
#if TS_Q_VNNI
  return _mm256_dpbusd_avx_epi32(s, u, x);
#else
  __m256i sum = _mm256_add_epi16(s, _mm256_maddubs_epi16(u, x));
  // An empty asm pins the chain: integer adds may be reassociated, and GCC then formed every product of a tile
  // first (32 for 4 rows), spilled them and summed them as a tree.
  asm("" : "+x"(sum));
  return sum;
#endif
}

// The int32 sums of add_small_quad's accumulator.
TS_Q_TARGET inline __m256i widen_small_sums(__m256i s) {
#if TS_Q_VNNI
  return s;
#else
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
#endif
}

// The int32 products of one 32-value block of 4-bit weights (8 lanes; quad i in the low nibbles and quad i + 4 in
// the high nibbles of the 32 bytes at quants + 64 i, as Q4_0 and Q4_K pack them) with R rows' activations (row r's
// block at xq + r * ldx): sums[r], one quad's weights in registers at a time.
template <int R>
TS_Q_TARGET inline void dot_nibble_block(const uint8_t* quants, const int8_t* xq, size_t ldx, __m256i (&sums)[R]) {
  xq = activations_for_half<R>(xq);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) sums[r] = _mm256_setzero_si256();
  #pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * i));
    const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int8_t* x = xq + r * ldx;
      sums[r] = add_small_quad(sums[r], lo, broadcast_quad(x + 4 * i));
      sums[r] = add_small_quad(sums[r], hi, broadcast_quad(x + 16 + 4 * i));
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) sums[r] = widen_small_sums(sums[r]);  // 8 quads of <= 15: inside int16
}

// y[r, 8h .. 8h + 7] = acc[r] for R rows of ldy floats, of which the group's first valid_lanes are real.
template <int R>
TS_Q_TARGET inline void store_half(const __m256 (&acc)[R], float* y, int ldy, int valid_lanes, int h) {
  const int valid = std::min(8, valid_lanes - 8 * h);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (valid == 8) {
      _mm256_storeu_ps(y + size_t(r) * ldy + 8 * h, acc[r]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[r]);
      std::memcpy(y + size_t(r) * ldy + 8 * h, tmp, sizeof(float) * valid);
    }
  }
}
