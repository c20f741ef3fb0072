// Micro benchmark of the masked attention kernel: one layer of a Qwen3-0.6B-shaped model (16 query heads, 8 KV
// heads, head_dim 128) for a tree of n_q nodes over a cached prefix. Prints the minimum over repetitions (the
// machine is shared); with 1 thread the clock is the thread's CPU time. K/V as f32 (row-major and head-major)
// and as bf16 (row-major, head-major, in scattered pages of 16 rows, and as the target's bf16 KV cache holds them:
// K in tiles of 16 keys, V head-major; attention_tiled, in one span, and with the prefix in scattered runs of run_rows
// rows, default 16, as a request reading prefix-cache blocks in place passes them).
//   bench_attention [threads] [cold|warm] [heads kv_heads head_dim [prefix n_q [run_rows]]]
//   (environment: BENCH_REPS repetitions, default 15; BENCH_TILED_ONLY=1 times the KV cache's layout alone)
// (default shape 16/8/128 over prefixes 128..4096 and 1, 8, 32 query rows; e.g. the shipped target's last chat turn:
// bench_attention 2 warm 8 4 64 900 96)
// cold: 64 MiB are touched before every call, so the K/V come from DRAM as in a model forward (where the weights
// stream through L3 between two layers' attention); without it the same K/V stay in L2/L3 from call to call.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/timer.h"
#include "kernels/ops.h"

using namespace ts;

namespace {
double clock_ms(bool cpu_clock) {
  if (!cpu_clock) return now_ms();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  set_num_threads(threads);
  const bool cpu_clock = threads == 1;
  const bool cold = argc > 2 && std::string(argv[2]) == "cold";
  std::vector<char> flush(cold ? size_t(64) << 20 : 0, 1);  // touched before each call when cold
  const int heads = argc > 5 ? std::atoi(argv[3]) : 16, kv_heads = argc > 5 ? std::atoi(argv[4]) : 8,
            hd = argc > 5 ? std::atoi(argv[5]) : 128;
  std::vector<int> prefixes = {128, 512, 1024, 4096}, query_rows = {1, 8, 32};
  if (argc > 7) prefixes = {std::atoi(argv[6])}, query_rows = {std::atoi(argv[7])};
  const int run_rows = argc > 8 ? std::atoi(argv[8]) : 16;  // rows per shared run, a multiple of 16
  if (run_rows < 16 || run_rows % 16 != 0) {
    std::fprintf(stderr, "run_rows must be a positive multiple of 16\n");
    return 1;
  }
  // BENCH_REPS: repetitions per layout (default 15); BENCH_TILED_ONLY=1: only the KV cache's layout (for profiles).
  const int reps = std::getenv("BENCH_REPS") ? std::max(1, std::atoi(std::getenv("BENCH_REPS"))) : 15;
  const bool tiled_only = std::getenv("BENCH_TILED_ONLY") && std::string(std::getenv("BENCH_TILED_ONLY")) == "1";
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::printf("threads=%d (%s clock), heads %d/%d, head_dim %d, ISA %s, K/V %s\n", threads, cpu_clock ? "CPU" : "wall",
              heads, kv_heads, hd, kernels::ops_isa(), cold ? "cold (from DRAM)" : "warm (in cache)");
  for (int prefix : prefixes) {
    for (int n_q : query_rows) {
      const int n_kv = prefix + n_q;
      std::vector<float> q(size_t(n_q) * heads * hd), k(size_t(n_kv) * kv_heads * hd), v(k.size()), out(q.size());
      for (auto* buf : {&q, &k, &v})
        for (auto& x : *buf) x = normal(rng);
      // A chain-shaped tree (each node sees the prefix and all earlier nodes): the densest mask.
      std::vector<uint8_t> visible(size_t(n_q) * n_kv);
      for (int i = 0; i < n_q; ++i)
        for (int j = 0; j < n_kv; ++j) visible[size_t(i) * n_kv + j] = j < prefix + i + 1;
      // The same K/V in a head-major cache [kv_heads, n_kv, hd] (attention_strided).
      std::vector<float> k_hm(k.size()), v_hm(v.size());
      for (int j = 0; j < n_kv; ++j)
        for (int g = 0; g < kv_heads; ++g)
          for (int d = 0; d < hd; ++d) {
            k_hm[(size_t(g) * n_kv + j) * hd + d] = k[(size_t(j) * kv_heads + g) * hd + d];
            v_hm[(size_t(g) * n_kv + j) * hd + d] = v[(size_t(j) * kv_heads + g) * hd + d];
          }
      // The same K/V as bf16 bits, row-major (attention_bf16kv) and head-major: what the target's bf16 KV cache
      // holds (attention_strided_bf16kv).
      std::vector<uint16_t> k16(k.size()), v16(v.size()), k16_hm(k.size()), v16_hm(v.size());
      for (size_t i = 0; i < k.size(); ++i) k16[i] = f32_to_bf16(k[i]), v16[i] = f32_to_bf16(v[i]);
      for (size_t i = 0; i < k.size(); ++i) k16_hm[i] = f32_to_bf16(k_hm[i]), v16_hm[i] = f32_to_bf16(v_hm[i]);
      // The same bf16 K/V in pages of 16 rows ([2 layers][K, V][kv_heads][16][hd], layer 1 read), pages scattered in a
      // pool of twice as many (attention_paged).
      constexpr int kShift = 4, kPageRows = 1 << kShift, kLayers = 2;
      const int n_pages = (n_kv + kPageRows - 1) / kPageRows;
      const size_t page_elems = size_t(kLayers) * 2 * kv_heads * kPageRows * hd;
      const int64_t page_head_stride = int64_t(kPageRows) * hd, k_off = 2 * kv_heads * page_head_stride,
                    v_off = k_off + kv_heads * page_head_stride;
      std::vector<uint16_t> pool(page_elems * 2 * n_pages);
      std::vector<const uint16_t*> pages(n_pages);
      for (int i = 0; i < n_pages; ++i) pages[i] = pool.data() + page_elems * ((i * 7919) % (2 * n_pages));
      for (int j = 0; j < n_kv; ++j)
        for (int g = 0; g < kv_heads; ++g)
          for (int d = 0; d < hd; ++d) {
            uint16_t* page = const_cast<uint16_t*>(pages[j >> kShift]);
            const size_t at = size_t(g) * page_head_stride + size_t(j & (kPageRows - 1)) * hd + d;
            page[k_off + at] = k16_hm[(size_t(g) * n_kv + j) * hd + d];
            page[v_off + at] = v16_hm[(size_t(g) * n_kv + j) * hd + d];
          }
      // The bf16 KV cache's layout: K in tiles of 16 keys [kv_heads][tiles][hd][16], V head-major, one head stride.
      const int64_t tiled_stride = int64_t((n_kv + 15) / 16) * 16 * hd;
      std::vector<uint16_t> k16_tiled(size_t(kv_heads) * tiled_stride), v16_tiled(k16_tiled.size());
      for (int j = 0; j < n_kv; ++j)
        for (int g = 0; g < kv_heads; ++g)
          for (int d = 0; d < hd; ++d) {
            const uint16_t kb = k16_hm[(size_t(g) * n_kv + j) * hd + d], vb = v16_hm[(size_t(g) * n_kv + j) * hd + d];
            k16_tiled[size_t(g) * tiled_stride + size_t(j / 16) * 16 * hd + size_t(d) * 16 + j % 16] = kb;
            v16_tiled[size_t(g) * tiled_stride + size_t(j) * hd + d] = vb;
          }
      // The same tiles with the prefix's whole runs of run_rows rows elsewhere, each run as a span of its own
      // ([2 layers][K, V][kv_heads][run_rows hd], layer 1 read, runs scattered in a pool of twice as many), then the
      // rest in the sequence's own buffer: the spans a request reading cached prefix blocks in place passes.
      const int runs = prefix / run_rows, own_first = runs * run_rows, own_rows = n_kv - own_first;
      const size_t run_elems = size_t(run_rows) * hd;  // one head's keys (or values) in a run
      const size_t pool_run_elems = size_t(kLayers) * 2 * kv_heads * run_elems;
      std::vector<uint16_t> run_pool(pool_run_elems * 2 * std::max(runs, 1));
      const int64_t own_stride = int64_t((own_rows + 15) / 16) * 16 * hd;
      std::vector<uint16_t> k16_own(size_t(kv_heads) * own_stride), v16_own(k16_own.size());
      std::vector<kernels::KVSpan> spans;
      for (int b = 0; b < runs; ++b) {
        uint16_t* layer1 = run_pool.data() + pool_run_elems * ((b * 7919) % (2 * runs)) + 2 * kv_heads * run_elems;
        for (int g = 0; g < kv_heads; ++g) {  // [K, V][kv_heads][run_rows hd]
          const size_t from = size_t(g) * tiled_stride + size_t(b) * run_elems;
          std::copy_n(&k16_tiled[from], run_elems, layer1 + size_t(g) * run_elems);
          std::copy_n(&v16_tiled[from], run_elems, layer1 + size_t(kv_heads + g) * run_elems);
        }
        spans.push_back(kernels::KVSpan{layer1, layer1 + size_t(kv_heads) * run_elems, int64_t(run_elems), b * run_rows});
      }
      for (int g = 0; g < kv_heads; ++g) {
        const size_t from = size_t(g) * tiled_stride + size_t(own_first) * hd;
        std::copy_n(&k16_tiled[from], size_t(own_stride), &k16_own[size_t(g) * own_stride]);
        std::copy_n(&v16_tiled[from], size_t(own_rows) * hd, &v16_own[size_t(g) * own_stride]);
      }
      spans.push_back(kernels::KVSpan{k16_own.data(), v16_own.data(), own_stride, own_first});
      std::vector<double> times, times_hm, times_bf16, times_bf16_hm, times_paged, times_tiled, times_spans;
      auto timed = [&](std::vector<double>& into, auto&& call) {
        if (cold)
          for (size_t i = 0; i < flush.size(); i += 64) flush[i] = char(flush[i] + 1);
        const double t0 = clock_ms(cpu_clock);
        call();
        into.push_back(clock_ms(cpu_clock) - t0);
      };
      for (int rep = 0; rep < reps; ++rep) {
        timed(times_tiled, [&] {
          kernels::attention_tiled(q.data(), k16_tiled.data(), v16_tiled.data(), tiled_stride, visible.data(),
                                   out.data(), n_q, n_kv, heads, kv_heads, hd, 0.088f);
        });
        if (tiled_only) continue;
        timed(times, [&] {
          kernels::attention(q.data(), k.data(), v.data(), visible.data(), out.data(), n_q, n_kv, heads, kv_heads, hd,
                             0.088f);
        });
        timed(times_hm, [&] {
          kernels::attention_strided(q.data(), k_hm.data(), v_hm.data(), hd, int64_t(n_kv) * hd, visible.data(),
                                     out.data(), n_q, n_kv, heads, kv_heads, hd, 0.088f);
        });
        timed(times_bf16, [&] {
          kernels::attention_bf16kv(q.data(), k16.data(), v16.data(), visible.data(), out.data(), n_q, n_kv, heads,
                                    kv_heads, hd, 0.088f);
        });
        timed(times_paged, [&] {
          kernels::attention_paged(q.data(), pages.data(), kShift, k_off, v_off, page_head_stride, visible.data(),
                                   out.data(), n_q, n_kv, heads, kv_heads, hd, 0.088f);
        });
        timed(times_spans, [&] {
          kernels::attention_tiled(q.data(), spans.data(), int(spans.size()), DType::BF16, visible.data(), out.data(),
                                   n_q, n_kv, heads, kv_heads, hd, 0.088f);
        });
        timed(times_bf16_hm, [&] {
          kernels::attention_strided_bf16kv(q.data(), k16_hm.data(), v16_hm.data(), hd, int64_t(n_kv) * hd,
                                            visible.data(), out.data(), n_q, n_kv, heads, kv_heads, hd, 0.088f);
        });
      }
      auto best = [](const std::vector<double>& t) { return *std::min_element(t.begin(), t.end()) * 1e3; };
      if (tiled_only) {
        std::printf("prefix %5d  n_q %3d : K tiles (the cache) %8.1f us\n", prefix, n_q, best(times_tiled));
        continue;
      }
      std::printf("prefix %5d  n_q %3d : f32 row-major %8.1f us, head-major %8.1f us; bf16 row-major %8.1f us, "
                  "head-major %8.1f us, pages of 16 %8.1f us, K tiles (the cache) %8.1f us, prefix in runs "
                  "of %d rows %8.1f us\n",
                  prefix, n_q, best(times), best(times_hm), best(times_bf16), best(times_bf16_hm), best(times_paged),
                  best(times_tiled), run_rows, best(times_spans));
    }
  }
}
