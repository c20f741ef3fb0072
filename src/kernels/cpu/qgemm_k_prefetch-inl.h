// Internal: the K-quant tiles' software prefetch of the weight stream, included inside the namespace of
// qgemm_k_avx2-inl.h, qgemm_k_avx512-inl.h and qgemm_amx.cc (after <immintrin.h>; once per namespace,
// so no include guard). Expects TS_Q_TARGET.

// kPrefetchBytes ahead of the super-block being read, an eighth of a super-block per 32-value block, by each
// group's first row tile (the later tiles find the group in L1/L2; a prefetch past the buffer never faults). With
// the hardware prefetcher alone a one-row Q4_K product streamed from DRAM at half of Q4_0's bandwidth (Zen 5); two
// super-blocks ahead (4.6 KB for Q4_K, 6.7 KB for Q6_K) streamed at ~60% of Q4_0's on a Xeon with AMX, 2 KB ahead
// (Q4_0's distance) as fast as Q4_0 (docs/results/optimization-notes.md, "K-quant GEMM: software prefetch of the
// weight stream").
constexpr size_t kPrefetchBytes = 2048;
template <size_t kSuperBytes>
TS_Q_TARGET inline void prefetch_part(const uint8_t* sb, int part) {
  const char* p = reinterpret_cast<const char*>(sb + kPrefetchBytes + kSuperBytes / 8 * part);
  #pragma GCC unroll 8
  for (size_t c = 0; c < kSuperBytes / 8; c += 64) _mm_prefetch(p + c, _MM_HINT_T0);
}
