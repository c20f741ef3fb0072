// Where attention finds a task's key and value rows (the row-address policies of attention-inl.h), included by it
// inside its namespace. Values: StridedRows (one base and a stride) and PagedRows (pages of 2^shift rows, e.g. the
// KV cache's spans as 16-row tiles). Keys, a key block's tiles: KeyTiles (K stored in tiles, read in place) and
// TransposedKeys (row-major keys copied into tiles). Only addresses differ: every path reads rows through these and
// computes the same bits whichever is used.

// Where key (or value) row j of the task's KV head starts. A per-sequence cache holds rows `stride` elements apart
// from one base; a paged one (a block table) holds pages of 2^shift rows, row j at row j & mask of page j >> shift.
// Only the addresses differ: every path below reads rows through these and computes the same bits either way.
template <typename KvT>
struct StridedRows {
  using Elem = KvT;
  const KvT* base;
  size_t stride;  // elements between rows j and j + 1
  const KvT* operator()(int j) const { return base + size_t(j) * stride; }
  int run(int) const { return 1 << 30; }  // rows from j on that sit `stride` apart: all of them
  // Software prefetch only for strided rows (row-major: one head's rows kv_dim apart, a new page every few keys).
  // Contiguous rows (the head-major cache) stream on the hardware prefetchers, and the hints only cost
  // (docs/results/optimization-notes.md, "Attention: software prefetch only for strided K/V rows").
  bool prefetch(int head_dim) const { return stride != size_t(head_dim); }
  void prefetch_runs(int, int, int) const {}
};
template <typename KvT>
struct PagedRows {
  using Elem = KvT;
  const KvT* const* pages;  // [n_kv >> shift (rounded up)] page starts
  size_t offset;            // elements from a page's start to this head's row 0
  int shift;                // log2(rows per page)
  size_t stride;            // elements between rows j and j + 1 within a page
  const KvT* operator()(int j) const {
    return pages[j >> shift] + offset + size_t(j & ((1 << shift) - 1)) * stride;
  }
  int run(int j) const { return (1 << shift) - (j & ((1 << shift) - 1)); }  // rows left in j's page
  bool prefetch(int) const { return false; }  // rows within a page are contiguous, as the head-major cache's
  // Asks for rows [j0, j1) ahead of use, page by page, where a page does not continue the one before it: short runs
  // (a shared prefix block's 16 rows of a head) end before the hardware prefetchers pick them up.
  void prefetch_runs(int j0, int j1, int row_elems) const {
    for (int p = j0 >> shift; (p << shift) < j1; ++p)
      if (p > 0 && pages[p] != pages[p - 1] + (size_t(stride) << shift))
        prefetch_row(pages[p] + offset, row_elems << shift);
  }
};

// Where a key block's tiles come from: keys [tb0, tb0 + 16 n_tiles) of the task's head as n_tiles pointers to tiles
// of [head_dim][16]. KeyTiles: K stored in tiles (attention_tiled(), the KV cache), read in place through a table
// of the head's tiles (its spans: shared prefix blocks, then the sequence's own rows). TransposedKeys: row-major keys
// (attention(), attention_strided(), attention_paged()) copied into tiles in the task's scratch, keys past n_kv as
// zeros. The tiles hold the same values either way, so every layout gives the same bits.
template <typename KvT>
struct KeyTiles {
  using Elem = KvT;
  const KvT* const* tiles;  // [ceil(n_kv / 16)] the head's tiles, each [head_dim][16]
  const KvT* const* block(int tb0, int, int, int, std::vector<KvT>&, std::vector<const KvT*>&) const {
    return tiles + tb0 / kTileKeys;
  }
  // Asks for the tiles of keys [j0, j1) ahead of use where a tile does not continue the one before it (as PagedRows).
  void prefetch_runs(int j0, int j1, int head_dim) const {
    const size_t tile_elems = size_t(kTileKeys) * head_dim;
    for (int t = j0 / kTileKeys; t * kTileKeys < j1; ++t)
      if (t > 0 && tiles[t] != tiles[t - 1] + tile_elems) prefetch_row(tiles[t], int(tile_elems));
  }
};
template <typename Rows>
struct TransposedKeys {
  using Elem = typename Rows::Elem;
  Rows rows;
  const Elem* const* block(int tb0, int n_tiles, int n_kv, int head_dim, std::vector<Elem>& scratch,
                           std::vector<const Elem*>& tile_ptrs) const {
    scratch.resize(size_t(n_tiles) * kTileKeys * head_dim);  // [n_tiles][head_dim][16]
    tile_ptrs.resize(n_tiles);
    for (int t = 0; t < n_tiles; ++t) {
      Elem* tile = scratch.data() + size_t(t) * kTileKeys * head_dim;  // [head_dim][16]
      for (int u = 0; u < kTileKeys; ++u) {
        const int j = tb0 + t * kTileKeys + u;
        const Elem* row = j < n_kv ? rows(j) : nullptr;  // [head_dim]
        for (int d = 0; d < head_dim; ++d) tile[size_t(d) * kTileKeys + u] = row ? row[d] : Elem(0);
      }
      tile_ptrs[t] = tile;
    }
    return tile_ptrs.data();
  }
  void prefetch_runs(int, int, int) const {}
};

