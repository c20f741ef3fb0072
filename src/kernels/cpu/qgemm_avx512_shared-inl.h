// Internal: what the avx512 quantized GEMMs share (activation quads, their integer dot products, tile stores), included
// inside the namespace of qgemm_avx512-inl.h and qgemm_k_avx512-inl.h (after <immintrin.h> and <cstring>; once per
// namespace, so no include guard). Expects TS_Q_TARGET and TS_Q_VNNI.

TS_Q_TARGET inline __m512i broadcast_quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Exact sum of 4 unsigned x signed byte products per int32 lane, added to s. Without VNNI the pair sums of
// vpmaddubsw must not saturate: callers guarantee u <= 128 (|x| <= 127, so |pair| <= 32512).
TS_Q_TARGET inline __m512i dot_quads(__m512i s, __m512i u, __m512i x) {
#if TS_Q_VNNI
  return _mm512_dpbusd_epi32(s, u, x);
#else
  const __m512i pairs = _mm512_maddubs_epi16(u, x);
  return _mm512_add_epi32(s, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
#endif
}

// dot_quads(s, u, broadcast_quad(p)); with VNNI and kFused, the quad is the instruction's broadcast memory operand
// (inline asm: GCC keeps set1 + vpdpbusd as two instructions, and the separate vpbroadcastd costs a slot per
// product). Tiles of 4+ rows always fuse. Below that a tile waits on the weight stream more than it computes, and
// the fused form was slower from DRAM for Q4_0 and Q6_K at 2-3 rows (Q6_K M = 2: 1.23x -> 1.37x of one row) but
// faster for Q8_0 and Q4_K (Q8_0 M = 3: 1.27x -> 1.14x; Q4_K M = 3: 1.28x -> 1.25x, cache-resident 1.91x ->
// 1.81x), so each tile says from how many rows it fuses.
template <bool kFused>
TS_Q_TARGET inline __m512i dot_quad_at(__m512i s, __m512i u, const int8_t* p) {
#if TS_Q_VNNI
  if constexpr (kFused) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(s) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(p)));
    return s;
  }
#endif
  return dot_quads(s, u, broadcast_quad(p));
}

// Quad q of G groups' weights (w[g][q]) times the activation quad at p, added to s[g][q % kChains]: for one group
// through dot_quad_at<kFused>; for two (one chain each), one broadcast feeds both groups' products.
template <bool kFused, int G, int kChains>
TS_Q_TARGET inline void dot_quad_groups(__m512i (&s)[G][kChains], const __m512i (&w)[G][8], int q, const int8_t* p) {
  static_assert(G == 1 || kChains == 1, "two groups take one chain each");
  if constexpr (G == 1) {
    s[0][q % kChains] = dot_quad_at<kFused>(s[0][q % kChains], w[0][q], p);
  } else {
    const __m512i x = broadcast_quad(p);
    #pragma GCC unroll 2
    for (int g = 0; g < G; ++g) s[g][0] = dot_quads(s[g][0], w[g][q], x);
  }
}

// The 256 bytes of 4 nibble quads at `quants` (Q4_0's and Q4_K's packing) as 8 quads of one value per byte:
// w[i] = the low nibbles of quad i (k = 4i..4i+3), w[i + 4] = the high ones (k = 16 + 4i..).
TS_Q_TARGET inline void unpack_nibble_quads(const uint8_t* quants, __m512i (&w)[8]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  #pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512i v = _mm512_loadu_si512(quants + 64 * i);
    w[i] = _mm512_and_si512(v, low4);
    w[i + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
  }
}

// acc[g][r] to y[r ldy + 16 g, ...): R rows of G groups of 16 outputs, of the last group its first valid_last.
template <int G, int R>
TS_Q_TARGET inline void store_groups(const __m512 (&acc)[G][R], float* y, int ldy, int valid_last) {
  #pragma GCC unroll 2
  for (int g = 0; g < G; ++g) {
    const int valid = g == G - 1 ? valid_last : 16;
    const __mmask16 mask = valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1u);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + size_t(r) * ldy + g * 16, mask, acc[g][r]);
  }
}
