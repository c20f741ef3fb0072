// Internal: the avx2 quantized tiles' prefetch of the next group's weight stream (NextGroup), included inside the
// namespace of qgemm_avx2-inl.h and qgemm_k_avx2-inl.h (after <immintrin.h> and core/cpu.h; once per namespace, so
// no include guard). Expects TS_Q_TARGET.

// The next group's weight stream, asked for by a group's row tiles while they compute. Where the weights stream from
// DRAM (weights_streamed(), core/cpu.h) and a group takes two or more of the 4-row tiles (a verify of 5 rows or
// more), tile t of n asks for the next group's parts t, t + n, t + 2n, ... (into L2) as it walks its own group. The
// first tile's own prefetch (kPrefetchBytes ahead in the current group) alone left DRAM idle while the later tiles
// read the group from cache; spread over every tile, the stream runs under all of them. The avx512 tiles' second 16
// rows gained nothing from the same (docs/results/optimization-notes.md, "avx2 quantized GEMM: the next group's
// stream under every row tile").
struct NextGroup {
  const uint8_t* bytes = nullptr;  // the next group's first byte; nullptr: no prefetch ahead
  int tile = 0, tiles = 1;         // this row tile's index among the group's row tiles
};

// Whether a call's groups take `tiles` row tiles and stream from DRAM: its tiles then ask for the next group (once
// per call; the hint does not change during one).
inline bool ask_ahead(int tiles) { return tiles > 1 && weights_streamed(); }

// Asks for part `part` of the next group (kPartBytes long, parts back to back from its start) if it is this tile's
// to ask for. A prefetch past the packed buffer (after the last group) never faults. The test stays at the call
// site: with it inside this template, GCC 12 dropped the prefetches (no prefetcht1 in the object).
template <size_t kPartBytes>
TS_Q_TARGET inline void prefetch_part_l2(const uint8_t* part_bytes) {
  #pragma GCC unroll 8
  for (size_t c = 0; c < kPartBytes; c += 64) _mm_prefetch(reinterpret_cast<const char*>(part_bytes + c), _MM_HINT_T1);
}
inline bool asks_for(const NextGroup& next, int part) { return next.bytes && part % next.tiles == next.tile; }
