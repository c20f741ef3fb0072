// Internal: what the avx512 quantized GEMMs share (activation quads and their integer dot products), included
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

// dot_quads(s, u, broadcast_quad(p)). In tiles of 4+ rows, with VNNI, the quad is the instruction's broadcast
// memory operand: GCC keeps set1 + vpdpbusd as two instructions, and the separate vpbroadcastd costs a slot per
// product. Below 4 rows the tile waits on the weight stream more than it computes, and there the fused form was
// slower from DRAM (Q6_K at 2-3 rows: 1.2x -> 1.4x of one row), so those keep the separate broadcast.
template <int R>
TS_Q_TARGET inline __m512i dot_quad_at(__m512i s, __m512i u, const int8_t* p) {
#if TS_Q_VNNI
  if constexpr (R >= 4) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(s) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(p)));
    return s;
  }
#endif
  return dot_quads(s, u, broadcast_quad(p));
}
