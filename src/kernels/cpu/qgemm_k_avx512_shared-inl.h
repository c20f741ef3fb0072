// Internal: what the avx512 K-quant GEMMs share (Q4_K's scale bytes), included inside the namespace of
// qgemm_k_avx512-inl.h and qgemm_amx.cc (after <immintrin.h> and qgemm_k.h; once per namespace, so no include
// guard). Expects TS_Q_TARGET.

// (a & 0x0F) | b per byte, for b with a zero low nibble.
TS_Q_TARGET inline __m512i low_nibble_or(__m512i a, __m512i b) {
  return _mm512_ternarylogic_epi32(a, b, _mm512_set1_epi8(0x0F), 0xEC);  // (A & C) | B
}

TS_Q_TARGET inline __m512i bits_4_5(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x30)); }

// Q4_K's 6-bit scales and mins of one group super-block as bytes: sc, mn: [8 j][16 lanes]. Four 64-byte stores; a
// sub-block's 16 bytes are read back (widened) one block later, long after the stores have retired.
TS_Q_TARGET inline void q4k_scale_bytes(const uint8_t* sb, uint8_t* sc, uint8_t* mn) {
  const __m512i lo_a = _mm512_loadu_si512(sb + 64), lo_b = _mm512_loadu_si512(sb + 128);
  const __m512i hi = _mm512_loadu_si512(sb + 192);
  _mm512_store_si512(sc, low_nibble_or(lo_a, bits_4_5(_mm512_slli_epi16(hi, 4))));
  _mm512_store_si512(sc + 64, low_nibble_or(lo_b, bits_4_5(hi)));
  _mm512_store_si512(mn, low_nibble_or(_mm512_srli_epi16(lo_a, 4), bits_4_5(_mm512_slli_epi16(hi, 2))));
  _mm512_store_si512(mn + 64, low_nibble_or(_mm512_srli_epi16(lo_b, 4), bits_4_5(_mm512_srli_epi16(hi, 2))));
}

// scale[lane] * bytes[lane] for 16 lanes: exact (an f16 value times a 6-bit integer).
TS_Q_TARGET inline __m512 scale_16(__m512 scale, const uint8_t* bytes) {
  return _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(bytes)))));
}
