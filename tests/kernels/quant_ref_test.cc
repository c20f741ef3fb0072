// The scalar GGUF quantizers and dequantizers (kernels/quant.h) against llama.cpp. ref::quantize_row must give
// ggml's blocks byte for byte and ref::dequantize_row ggml's floats bit for bit, on the fixtures in
// tests/data/quant/ that tools/py/make_quant_fixtures.py writes from ggml-quants.c and gguf-py (the file format is
// described there). Also: ragged rows are refused, and a quantize / dequantize round trip stays within each
// format's error bound. Every test runs once per format (QuantRef.<test>/Q8_0, ...).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/quant.h"

namespace ts::kernels {

// Test names and failure messages show the format ("Q4_K"), not the enum's bytes. Internal linkage: other test
// files of this binary may print QuantType too.
[[maybe_unused]] static void PrintTo(QuantType t, std::ostream* os) { *os << quant_type_name(t); }

namespace {

constexpr uint32_t kFixtureVersion = 1;
constexpr uint32_t kKindQuantize = 1, kKindDequantize = 2;

struct FixtureRow {
  std::string name;
  int64_t n_values = 0;
  std::vector<float> input;         // [n_values]; quantize fixtures only
  std::vector<uint8_t> blocks;      // [row_bytes(type, n_values)]: ggml's quantization of input, or crafted bytes
  std::vector<float> dequantized;   // [n_values]: ggml's dequantization of blocks
};

// Reads tests/data/quant/<type>_<kind>.bin; throws ts::Error (so the test fails with the message) on any mismatch.
class FixtureReader {
 public:
  FixtureReader(QuantType type, const std::string& kind) : type_(type) {
    std::string name = quant_type_name(type);
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    path_ = std::string(TS_TEST_DATA) + "/quant/" + name + "_" + kind + ".bin";
    std::ifstream in(path_, std::ios::binary);
    TS_CHECK(in, path_, ": cannot open (regenerate with tools/py/make_quant_fixtures.py)");
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::vector<FixtureRow> rows(uint32_t expected_kind) {
    char magic[4];
    read(magic, 4);
    TS_CHECK(std::memcmp(magic, "TSQF", 4) == 0, path_, ": not a quant fixture (magic)");
    TS_CHECK(u32() == kFixtureVersion, path_, ": fixture version is not ", kFixtureVersion);
    TS_CHECK(u32() == uint32_t(type_), path_, ": holds another ggml type than ", quant_type_name(type_));
    TS_CHECK(u32() == expected_kind, path_, ": kind is not ", expected_kind);
    std::vector<FixtureRow> rows(u32());
    for (FixtureRow& row : rows) {
      char name[32];
      read(name, sizeof name);
      row.name.assign(name, strnlen(name, sizeof name));
      row.n_values = u32();
      if (expected_kind == kKindQuantize) row.input = floats(row.n_values);
      row.blocks.resize(row_bytes(type_, row.n_values));
      read(row.blocks.data(), row.blocks.size());
      row.dequantized = floats(row.n_values);
    }
    TS_CHECK(pos_ == bytes_.size(), path_, ": ", bytes_.size() - pos_, " bytes after the last row");
    return rows;
  }

 private:
  void read(void* out, size_t n) {
    TS_CHECK(n <= bytes_.size() - pos_, path_, ": truncated at byte ", pos_, " (wanted ", n, " more)");
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
  }
  uint32_t u32() {
    uint32_t v;
    read(&v, 4);
    return v;
  }
  std::vector<float> floats(int64_t n) {
    std::vector<float> v(n);
    read(v.data(), v.size() * sizeof(float));
    return v;
  }

  QuantType type_;
  std::string path_;
  std::vector<char> bytes_;
  size_t pos_ = 0;
};

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// "" when y equals want in every bit, else where and how they first differ.
std::string first_bit_difference(const std::vector<float>& want, const std::vector<float>& y, int block_values) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (bits_of(want[i]) != bits_of(y[i]))
      return cat("value ", i, " (block ", i / block_values, "): ggml ", want[i], " (0x", std::hex, bits_of(want[i]),
                 "), ours ", y[i], " (0x", bits_of(y[i]), ")");
  }
  return "";
}

class QuantRef : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantRef, QuantizeMatchesGgmlByteForByte) {
  const QuantType type = GetParam();
  const size_t block = block_bytes(type);
  const auto rows = FixtureReader(type, "quantize").rows(kKindQuantize);
  ASSERT_GE(rows.size(), 10u);
  for (const FixtureRow& row : rows) {
    std::vector<uint8_t> blocks(row.blocks.size(), 0xA5);  // a pattern, so an unwritten byte shows
    ref::quantize_row(type, row.input.data(), blocks.data(), row.n_values);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i] != row.blocks[i]) {
        ADD_FAILURE() << row.name << ": block " << i / block << ", byte " << i % block << " of " << block
                      << ": ggml " << int(row.blocks[i]) << ", ours " << int(blocks[i]);
        break;
      }
    }
  }
}

TEST_P(QuantRef, DequantizeMatchesGgmlBitForBit) {
  const QuantType type = GetParam();
  auto rows = FixtureReader(type, "quantize").rows(kKindQuantize);  // blocks that quantization makes
  const auto crafted = FixtureReader(type, "dequantize").rows(kKindDequantize);  // random bytes, odd f16 scales
  ASSERT_GE(crafted.size(), 3u);
  rows.insert(rows.end(), crafted.begin(), crafted.end());
  for (const FixtureRow& row : rows) {
    std::vector<float> y(row.n_values, std::numeric_limits<float>::quiet_NaN());
    ref::dequantize_row(type, row.blocks.data(), y.data(), row.n_values);
    const std::string diff = first_bit_difference(row.dequantized, y, block_values(type));
    EXPECT_EQ(diff, "") << row.name;
  }
}

TEST_P(QuantRef, RaggedRowIsRefused) {
  const QuantType type = GetParam();
  const int64_t n = block_values(type);
  EXPECT_EQ(row_bytes(type, 0), 0u);
  EXPECT_EQ(row_bytes(type, 3 * n), 3 * block_bytes(type));
  EXPECT_THROW(row_bytes(type, -n), Error);
  for (int64_t ragged : {int64_t(1), n - 1, n + 1, 2 * n + n / 2}) {
    try {
      row_bytes(type, ragged);
      ADD_FAILURE() << "row_bytes accepted a row of " << ragged << " values";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(quant_type_name(type)), std::string::npos) << e.what();
    }
    std::vector<float> x(ragged + n, 1.0f), y(ragged + n);
    std::vector<uint8_t> blocks(row_bytes(type, 2 * n + n));
    EXPECT_THROW(ref::quantize_row(type, x.data(), blocks.data(), ragged), Error);
    EXPECT_THROW(ref::dequantize_row(type, blocks.data(), y.data(), ragged), Error);
  }
}

// Round trip bounds. f16 rounds a scale d to d' with |d - d'| <= |d| 2^-11 (d in f16's normal range, as here), and
// `slop` covers f32 rounding of the products and of x * (1/d) versus x / d (a few ulp of the largest magnitude).
//
// Q8_0: d = amax / 127, q = round(x / d) in -127..127, x' = q d'.
//   |x - x'| <= |x - q d| + |q| |d - d'| <= d / 2 + 127 d 2^-11.
// Q4_0: d = max / -8 (max: the signed value of largest magnitude, which maps to q - 8 = -8 exactly),
//   q = min(15, floor(x / d + 8.5)), x' = (q - 8) d'. Rounding is to nearest (|x - (q - 8) d| <= |d| / 2) except
//   where x / d > 7.5 (same magnitude as max, opposite sign): the clamp to 7 costs up to one step |d|. Then
//   |q - 8| <= 8 adds 8 |d| 2^-11.
// Q4_K and Q6_K: each sub-block j stores a grid, Q4_K {d_j q - m_j : q = 0..15} (d_j = d sc_j, m_j = dmin m_j),
//   Q6_K {d_j q : q = -32..31} (d_j = d scales_j), and its last pass picks for every x the nearest grid point
//   (ggml's nearest_int of (x + m_j) / d_j, or of x / d_j, clamped to the levels). So |x - x'| <= the distance from
//   x to its sub-block's grid: <= |d_j| / 2 inside the grid's span, the distance to the nearer end outside it.
//   How the grid is fitted (least squares over trial grids, then 6-bit / int8 scales) is pinned byte for byte by
//   the fixtures above; here every sub-block of these gaussian rows must have a nonzero step (else the nearest-
//   point bound would hold trivially) and no more than about twice its nominal step: Q4_K (max - min(min, 0)) / 7
//   (nominal / 15: the fits try 14..16 steps per span), Q6_K amax / 15 (nominal amax / 32: 31.1..32.9 tried).
//   The 6-bit / int8 scales move a step by at most half the largest step, so a looser grid means a broken fit.
double grid_distance(double x, double step, double offset, int lo, int hi) {
  const double q = std::clamp(std::nearbyint((x + offset) / step), double(lo), double(hi));
  return std::fabs(x - (step * q - offset));
}

void check_round_trip(QuantType type, const float* x, const float* y, int64_t n, const void* blocks,
                      const std::string& label) {
  const int bv = block_values(type);
  for (int64_t b = 0; b < n / bv; ++b) {
    const float* xb = x + b * bv;
    const float* yb = y + b * bv;
    double amax = 0;
    for (int i = 0; i < bv; ++i) amax = std::max(amax, std::fabs(double(xb[i])));
    const double slop = 16 * amax * std::ldexp(1.0, -24);
    for (int i = 0; i < bv; ++i) {
      double bound = 0;
      if (type == QuantType::Q8_0) {
        const double d = amax / 127;
        bound = d / 2 + 127 * d * std::ldexp(1.0, -11);
      } else if (type == QuantType::Q4_0) {
        const double d = f16_to_f32(static_cast<const BlockQ4_0*>(blocks)[b].d);  // sign of -max / 8
        const bool clamped_top = xb[i] / d > 7.49;
        bound = std::fabs(d) * ((clamped_top ? 1.0 : 0.5) + 8 * std::ldexp(1.0, -11)) * (1 + 1e-3);
      } else if (type == QuantType::Q4_K) {
        const auto& blk = static_cast<const BlockQ4_K*>(blocks)[b];
        uint8_t sc, m;
        q4k_scale_min(i / 32, blk.scales, &sc, &m);
        const double step = double(f16_to_f32(blk.d)) * sc, offset = double(f16_to_f32(blk.dmin)) * m;
        ASSERT_GT(step, 0) << label << " block " << b << " sub-block " << i / 32;
        bound = grid_distance(xb[i], step, offset, 0, 15);
      } else {
        const auto& blk = static_cast<const BlockQ6_K*>(blocks)[b];
        const double step = double(f16_to_f32(blk.d)) * blk.scales[i / 16];
        ASSERT_NE(step, 0) << label << " block " << b << " sub-block " << i / 16;
        bound = grid_distance(xb[i], step, 0.0, -32, 31);
      }
      ASSERT_LE(std::fabs(double(xb[i]) - yb[i]), bound + slop)
          << label << " value " << b * bv + i << ": x " << xb[i] << ", round trip " << yb[i];
    }
  }
}

// The "about twice the nominal step" sanity bound on K-quant steps (see above), per sub-block.
void check_k_steps(QuantType type, const float* x, const void* blocks, int64_t n_blocks, const std::string& label) {
  const int sub = type == QuantType::Q4_K ? 32 : 16;
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int j = 0; j < kQK_K / sub; ++j) {
      const float* xs = x + b * kQK_K + j * sub;
      double lo = 0, hi = 0, amax = 0;
      for (int i = 0; i < sub; ++i) {
        lo = std::min(lo, double(xs[i]));
        hi = std::max(hi, double(xs[i]));
        amax = std::max(amax, std::fabs(double(xs[i])));
      }
      double step, max_step;
      if (type == QuantType::Q4_K) {
        const auto& blk = static_cast<const BlockQ4_K*>(blocks)[b];
        uint8_t sc, m;
        q4k_scale_min(j, blk.scales, &sc, &m);
        step = double(f16_to_f32(blk.d)) * sc;
        max_step = (hi - lo) / 7;  // lo <= 0: Q4_K's min is clamped to <= 0
      } else {
        const auto& blk = static_cast<const BlockQ6_K*>(blocks)[b];
        step = std::fabs(double(f16_to_f32(blk.d)) * blk.scales[j]);
        max_step = amax / 15;
      }
      EXPECT_LE(step, max_step) << label << " block " << b << " sub-block " << j;
    }
  }
}

TEST_P(QuantRef, RoundTripWithinBound) {
  const QuantType type = GetParam();
  const int64_t n = 4 * kQK_K;
  std::mt19937 rng(1234);
  for (float stddev : {1e-2f, 1.0f, 50.0f}) {
    for (int trial = 0; trial < 8; ++trial) {
      std::normal_distribution<float> normal(trial % 2 ? 0.5f * stddev : 0.0f, stddev);
      std::vector<float> x(n), y(n);
      for (float& v : x) v = normal(rng);
      std::vector<uint8_t> blocks(row_bytes(type, n));
      ref::quantize_row(type, x.data(), blocks.data(), n);
      ref::dequantize_row(type, blocks.data(), y.data(), n);
      const std::string label = cat("stddev ", stddev, " trial ", trial);
      check_round_trip(type, x.data(), y.data(), n, blocks.data(), label);
      if (type == QuantType::Q4_K || type == QuantType::Q6_K)
        check_k_steps(type, x.data(), blocks.data(), n / kQK_K, label);
    }
  }
}

// The many-block sets of make_quant_fixtures.py (a rounding difference that flips one of the K-quants' trial
// choices shows in only a few percent of blocks, more than the stored rows hold): 1024 super-blocks per set, the
// same portable generator, compared by digest. Each value is exact in f32: three 21-bit fields of a splitmix64
// output, summed, centred, times a power of two.
std::vector<float> splitmix64_values(uint64_t seed, int64_t n, int log2_scale) {
  std::vector<float> out(n);
  uint64_t state = seed;
  const float unit = std::ldexp(1.0f, log2_scale - 20);
  for (float& v : out) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const uint64_t field = (1u << 21) - 1;
    const int64_t centred = int64_t(z & field) + int64_t((z >> 21) & field) + int64_t((z >> 42) & field) - 3 * (1 << 20);
    v = float(centred) * unit;
  }
  return out;
}

// sum_i (byte_i + 1) * P^(n-1-i) mod 2^64, P = the FNV-64 prime.
uint64_t digest(const void* data, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint64_t h = 0;
  for (size_t i = 0; i < n; ++i) h = h * 0x100000001B3ull + (uint64_t(bytes[i]) + 1);
  return h;
}

TEST_P(QuantRef, ManyRandomBlocksMatchGgmlDigests) {
  const QuantType type = GetParam();
  std::string name = quant_type_name(type);
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  const std::string path = std::string(TS_TEST_DATA) + "/quant/many_blocks.txt";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << ": cannot open";
  int sets = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string fmt;
    int log2_scale;
    uint64_t seed;
    int64_t n;
    std::string want_blocks, want_values;
    ASSERT_TRUE(fields >> fmt >> log2_scale >> seed >> n >> want_blocks >> want_values) << path << ": " << line;
    if (fmt != name) continue;
    const std::vector<float> x = splitmix64_values(seed, n, log2_scale);
    std::vector<uint8_t> blocks(row_bytes(type, n));
    std::vector<float> y(n);
    ref::quantize_row(type, x.data(), blocks.data(), n);
    ref::dequantize_row(type, blocks.data(), y.data(), n);
    char got[2][17];
    std::snprintf(got[0], sizeof got[0], "%016llx", (unsigned long long)digest(blocks.data(), blocks.size()));
    std::snprintf(got[1], sizeof got[1], "%016llx", (unsigned long long)digest(y.data(), y.size() * 4));
    EXPECT_EQ(got[0], want_blocks) << "blocks of set 2^" << log2_scale << " seed " << seed;
    EXPECT_EQ(got[1], want_values) << "dequantized set 2^" << log2_scale << " seed " << seed;
    ++sets;
  }
  EXPECT_EQ(sets, 3) << path;
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantRef,
                         ::testing::Values(QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_K, QuantType::Q6_K),
                         [](const ::testing::TestParamInfo<QuantType>& info) {
                           return std::string(quant_type_name(info.param));
                         });

}  // namespace
}  // namespace ts::kernels
