// Every defect a GGUF file can have is a ts::Error naming the file and the key or tensor, with a phrase saying
// what is wrong; none crashes. Hand-built files break one field each; the gguf-py fixture is cut at every
// length and has its bytes overwritten one at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "io/gguf.h"
#include "io/io_test_util.h"

namespace ts::io {
namespace {

using testing::error_of;

// Little-endian GGUF bytes, written field by field.
struct Bytes {
  std::vector<uint8_t> b;

  Bytes& u8(uint8_t v) { b.push_back(v); return *this; }
  Bytes& u32(uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i))); return *this; }
  Bytes& u64(uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i))); return *this; }
  Bytes& str(const std::string& s) { u64(s.size()); b.insert(b.end(), s.begin(), s.end()); return *this; }
  Bytes& key(const std::string& k, GgufType type) { return str(k).u32(uint32_t(type)); }
  Bytes& tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  // Zero padding to a multiple of `align`, then `n` bytes of data.
  Bytes& data(size_t n, size_t align = 32) {
    while (b.size() % align) b.push_back(0);
    for (size_t i = 0; i < n; ++i) b.push_back(uint8_t(i * 7 + 1));
    return *this;
  }
};

Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes out;
  out.b = {'G', 'G', 'U', 'F'};
  return out.u32(version).u64(n_tensors).u64(n_kv);
}

std::string gguf_error(const std::vector<uint8_t>& bytes, const std::string& source = "bad.gguf") {
  return error_of([&] { GgufFile::parse(bytes.data(), bytes.size(), source); });
}
std::string gguf_error(const Bytes& bytes) { return gguf_error(bytes.b); }

// One key and two tensors: 'a' F32 ne [4] at 0 (16 bytes, padded to 32), 'b' Q8_0 ne [32, 2] at 32 (68 bytes).
Bytes valid_file() {
  Bytes f = header(2, 1);
  f.key("general.architecture", GgufType::String).str("llama");
  f.tensor("a", {4}, ggml_type::F32, 0).tensor("b", {32, 2}, ggml_type::Q8_0, 32);
  return f.data(100);
}

// A file with one key whose value bytes follow (type already written by the caller).
Bytes one_key(const std::string& key, GgufType type) {
  Bytes f = header(0, 1);
  f.key(key, type);
  return f;
}

// A file with one tensor 'w' and enough data for `data_bytes`.
Bytes one_tensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset, size_t data_bytes) {
  Bytes f = header(1, 0);
  f.tensor("w", ne, type, offset);
  return f.data(data_bytes);
}

std::vector<uint8_t> fixture_bytes(const std::string& name) {
  std::ifstream in(std::string(TS_TEST_DATA) + "/gguf/" + name, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Where `name`'s tensor info starts in a file (its length field), found by its bytes.
size_t tensor_info_at(const std::vector<uint8_t>& bytes, const std::string& name) {
  Bytes pattern;
  pattern.str(name);
  auto it = std::search(bytes.begin(), bytes.end(), pattern.b.begin(), pattern.b.end());
  EXPECT_NE(it, bytes.end()) << name;
  return size_t(it - bytes.begin());
}

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) { for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (8 * i)); }
void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) { for (int i = 0; i < 8; ++i) b[at + i] = uint8_t(v >> (8 * i)); }
uint64_t get_u64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}

TEST(GgufCorrupt, ValidBaselineParses) {
  const Bytes f = valid_file();
  GgufFile file = GgufFile::parse(f.b.data(), f.b.size(), "ok.gguf");
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensor("b").nbytes, 68u);
  EXPECT_EQ(file.tensor("b").data, f.b.data() + file.data_offset() + 32);
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
}

TEST(GgufCorrupt, BadMagic) {
  std::vector<uint8_t> b = valid_file().b;
  b[3] = 'X';
  EXPECT_MESSAGE_HAS(gguf_error(b), "bad.gguf", "not a GGUF file", "magic is 'GGUX'", "expected 'GGUF'");
  b[0] = 0;
  EXPECT_MESSAGE_HAS(gguf_error(b), "'?GUX' (bytes 00 47 55 58)");
  EXPECT_MESSAGE_HAS(gguf_error(std::vector<uint8_t>{'G', 'G'}), "bad.gguf", "2 bytes", "truncated");
  EXPECT_MESSAGE_HAS(gguf_error(std::vector<uint8_t>{}), "0 bytes", "truncated");
}

TEST(GgufCorrupt, UnsupportedVersion) {
  EXPECT_MESSAGE_HAS(gguf_error(header(0, 0, 1)), "bad.gguf", "GGUF version 1 is not supported");
  EXPECT_MESSAGE_HAS(gguf_error(header(0, 0, 4)), "unsupported GGUF version 4", "versions 2 and 3");
  EXPECT_MESSAGE_HAS(gguf_error(header(0, 0, 0)), "unsupported GGUF version 0");
  EXPECT_MESSAGE_HAS(gguf_error(header(0, 0, 0x03000000)), "looks byte-swapped", "big-endian");
  EXPECT_EQ(gguf_error(header(0, 0, 2)), "<no error>");
  EXPECT_EQ(gguf_error(header(0, 0, 3)), "<no error>");
}

TEST(GgufCorrupt, TruncatedHeader) {
  Bytes f = header(0, 0);
  f.b.resize(20);  // inside the kv count
  EXPECT_MESSAGE_HAS(gguf_error(f), "bad.gguf", "truncated file", "the header needs 8 bytes at offset 16");
}

TEST(GgufCorrupt, LyingCounts) {
  EXPECT_MESSAGE_HAS(gguf_error(header(uint64_t(1) << 62, 0)), "bad.gguf", "tensor count 4611686018427387904",
                     "impossible");
  EXPECT_MESSAGE_HAS(gguf_error(header(0, ~uint64_t(0))), "metadata count 18446744073709551615", "impossible");
  // Plausible counts that the file is merely too short for: the first missing record is reported.
  Bytes kvs = header(0, 2);
  kvs.key("a", GgufType::U32).u32(1).u64(0).u64(0);  // room for 2 records by size, but the second is cut
  EXPECT_MESSAGE_HAS(gguf_error(kvs), "metadata key #1", "empty");
  Bytes tensors = header(2, 0);
  tensors.tensor("a", {4}, ggml_type::F32, 0).u64(500).str("0123456789");  // room for 2 infos by size
  EXPECT_MESSAGE_HAS(gguf_error(tensors), "bad.gguf", "tensor #1 name", "string length 500", "runs past");
}

TEST(GgufCorrupt, LyingStringLengths) {
  Bytes key = header(0, 1);
  key.u64(~uint64_t(0)).str("filler-filler");
  EXPECT_MESSAGE_HAS(gguf_error(key), "bad.gguf", "metadata key #0", "string length 18446744073709551615",
                     "absurd");
  Bytes key_short = header(0, 1);
  key_short.u64(1000).str("xxxxxxxx");
  EXPECT_MESSAGE_HAS(gguf_error(key_short), "metadata key #0", "string length 1000", "runs past", "truncated");
  Bytes value = one_key("general.name", GgufType::String);
  value.u64(uint64_t(64) << 20 | 1).str("abc");
  EXPECT_MESSAGE_HAS(gguf_error(value), "key 'general.name'", "string length 67108865", "limit 67108864");
  Bytes name = header(1, 0);
  name.u64(500).str("w").str("filler-filler");
  EXPECT_MESSAGE_HAS(gguf_error(name), "tensor #0 name", "string length 500", "runs past");
}

TEST(GgufCorrupt, LyingArrayLengths) {
  Bytes ints = one_key("tokenizer.ggml.token_type", GgufType::Array);
  ints.u32(uint32_t(GgufType::I32)).u64(uint64_t(1) << 40).u32(1).u32(2);
  EXPECT_MESSAGE_HAS(gguf_error(ints), "bad.gguf", "key 'tokenizer.ggml.token_type'", "array length 1099511627776",
                     "4 bytes each", "8 bytes are left");
  Bytes strings = one_key("tokenizer.ggml.tokens", GgufType::Array);
  strings.u32(uint32_t(GgufType::String)).u64(3).str("a").str("b");
  EXPECT_MESSAGE_HAS(gguf_error(strings), "key 'tokenizer.ggml.tokens'", "array length 3", "8 bytes each");
  Bytes strings_cut = one_key("tokenizer.ggml.tokens", GgufType::Array);
  strings_cut.u32(uint32_t(GgufType::String)).u64(2).str("a").u64(100).str("b");
  EXPECT_MESSAGE_HAS(gguf_error(strings_cut), "key 'tokenizer.ggml.tokens'", "string length 100", "runs past");
  Bytes nested = one_key("x", GgufType::Array);
  nested.u32(uint32_t(GgufType::Array)).u64(~uint64_t(0) / 2);
  EXPECT_MESSAGE_HAS(gguf_error(nested), "key 'x'", "array length 9223372036854775807", "12 bytes each");
}

TEST(GgufCorrupt, EmptyArraysAreValid) {
  Bytes f = header(0, 2);
  f.key("e.strings", GgufType::Array).u32(uint32_t(GgufType::String)).u64(0);
  f.key("e.ints", GgufType::Array).u32(uint32_t(GgufType::U64)).u64(0);
  GgufFile file = GgufFile::parse(f.b.data(), f.b.size(), "ok.gguf");
  EXPECT_TRUE(file.get_strings("e.strings").empty());
  EXPECT_TRUE(file.get_ints("e.ints").empty());
  EXPECT_EQ(file.kv("e.ints").type_string(), "array[0] of u64");
}

TEST(GgufCorrupt, UnknownValueTypes) {
  Bytes scalar = one_key("k", GgufType(13));
  scalar.u32(0);
  EXPECT_MESSAGE_HAS(gguf_error(scalar), "bad.gguf", "key 'k'", "unknown value type 13");
  Bytes element = one_key("k", GgufType::Array);
  element.u32(99).u64(0);
  EXPECT_MESSAGE_HAS(gguf_error(element), "key 'k'", "unknown array element type 99");
}

TEST(GgufCorrupt, ArraysNestedTooDeep) {
  // Depth 3 (an array of arrays of arrays of u8) is read; depth 4 is refused.
  auto nested = [](int depth) {
    Bytes f = one_key("deep", GgufType::Array);
    for (int d = 1; d < depth; ++d) f.u32(uint32_t(GgufType::Array)).u64(1);
    f.u32(uint32_t(GgufType::U8)).u64(1).u8(42);
    return f;
  };
  const Bytes ok = nested(3);
  GgufFile file = GgufFile::parse(ok.b.data(), ok.b.size(), "ok.gguf");
  EXPECT_EQ(file.value("deep").items.at(0).items.at(0).items.at(0).u, 42u);
  EXPECT_MESSAGE_HAS(gguf_error(nested(4)), "bad.gguf", "key 'deep'", "nested deeper than 3");
  EXPECT_MESSAGE_HAS(gguf_error(nested(1000)), "nested deeper than 3");
}

TEST(GgufCorrupt, EmptyAndDuplicateKeys) {
  Bytes empty = header(0, 1);
  empty.key("", GgufType::U32).u32(1);
  EXPECT_MESSAGE_HAS(gguf_error(empty), "bad.gguf", "metadata key #0 is empty");
  Bytes twice = header(0, 2);
  twice.key("general.name", GgufType::U8).u8(1).key("general.name", GgufType::U8).u8(2);
  EXPECT_MESSAGE_HAS(gguf_error(twice), "bad.gguf", "duplicate metadata key 'general.name'");
}

TEST(GgufCorrupt, BadAlignment) {
  Bytes wide = header(0, 1);
  wide.key("general.alignment", GgufType::U64).u64(32);
  EXPECT_MESSAGE_HAS(gguf_error(wide), "bad.gguf", "'general.alignment' is u64, not u32");
  for (uint32_t a : {0u, 48u}) {
    Bytes f = header(0, 1);
    f.key("general.alignment", GgufType::U32).u32(a);
    EXPECT_MESSAGE_HAS(gguf_error(f), "general.alignment " + std::to_string(a), "not a power of two");
  }
}

TEST(GgufCorrupt, BadTensorShapes) {
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({1, 1, 1, 1, 1}, ggml_type::F32, 0, 4)), "bad.gguf", "tensor 'w'",
                     "has 5 dimensions", "at most 4");
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({4, uint64_t(1) << 63}, ggml_type::F32, 0, 16)), "tensor 'w'",
                     "ne[1] = 9223372036854775808", "negative as int64");
  // Elements overflow int64 (2^32 x 2^32), or would wrap to a small number in 64 bits (2^33 x 2^31 x 2).
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({uint64_t(1) << 32, uint64_t(1) << 32}, ggml_type::F32, 0, 0)),
                     "tensor 'w'", "ne [4294967296, 4294967296] has more than 2^63 elements");
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({uint64_t(1) << 33, uint64_t(1) << 31, 2}, ggml_type::I8, 0, 0)),
                     "more than 2^63 elements");
  // Rows overflow although ne[0] = 0 makes the product 0.
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({0, uint64_t(1) << 62, 4}, ggml_type::F32, 0, 0)),
                     "more than 2^63 elements");
  // Elements fit but bytes do not: 2^62 f32 values are 2^64 bytes.
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({uint64_t(1) << 62}, ggml_type::F32, 0, 0)), "tensor 'w'",
                     "f32 ne [4611686018427387904] needs more than 2^63 bytes");
  // A row that is not a whole number of quantization blocks.
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({40, 2}, ggml_type::Q8_0, 0, 256)), "tensor 'w'",
                     "a q8_0 row of ne[0] = 40 values is not a whole number of 32-value blocks");
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({}, ggml_type::Q4_K, 0, 256)), "q4_K row of ne[0] = 1 values");
  // A 0-d tensor holds one value; an empty one holds none.
  EXPECT_EQ(gguf_error(one_tensor({}, ggml_type::F32, 0, 4)), "<no error>");
  EXPECT_EQ(gguf_error(one_tensor({0, 7}, ggml_type::Q8_0, 0, 4)), "<no error>");
}

TEST(GgufCorrupt, UnknownGgmlTypes) {
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({4}, 31, 0, 16)), "bad.gguf", "tensor 'w'",
                     "unknown ggml type 31 (Q4_0_4_4, removed from ggml)");
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({4}, 43, 0, 16)), "unknown ggml type 43");
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({4}, 0xffffffffu, 0, 16)), "unknown ggml type 4294967295");
}

TEST(GgufCorrupt, BadOffsets) {
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({4}, ggml_type::F32, 4, 64)), "bad.gguf", "tensor 'w'",
                     "offset 4 is not a multiple of the alignment 32");
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({4}, ggml_type::F32, 64, 64)), "tensor 'w'",
                     "f32 ne [4], 16 bytes at offset 64", "runs past the end of the data section of 64 bytes");
  EXPECT_MESSAGE_HAS(gguf_error(one_tensor({4}, ggml_type::F32, ~uint64_t(0) - 31, 64)), "runs past the end");
  // The data section cut short.
  Bytes cut = valid_file();
  cut.b.resize(cut.b.size() - 1);
  EXPECT_MESSAGE_HAS(gguf_error(cut), "tensor 'b'", "runs past the end of the data section of 99 bytes",
                     "truncated");
  // Nothing after the tensor infos: the data section's start is past the end of the file.
  Bytes no_data = header(1, 0);
  no_data.tensor("w", {4}, ggml_type::F32, 0).u8(0);
  EXPECT_MESSAGE_HAS(gguf_error(no_data), "data section would start at offset 64", "truncated");
}

TEST(GgufCorrupt, OverlappingTensors) {
  Bytes same = header(2, 0);
  same.tensor("a", {8}, ggml_type::F32, 0).tensor("b", {8}, ggml_type::I32, 0).data(64);
  EXPECT_MESSAGE_HAS(gguf_error(same), "bad.gguf", "tensors 'a'", "and 'b'", "overlap");
  // A shape larger than its slot (ne [16] f32 = 64 bytes where the writer left 32) runs into the next tensor,
  // whichever order the infos are listed in.
  Bytes big = header(2, 0);
  big.tensor("late", {4}, ggml_type::F32, 32).tensor("early", {16}, ggml_type::F32, 0).data(64);
  EXPECT_MESSAGE_HAS(gguf_error(big), "tensors 'early' (f32 ne [16], 64 bytes at offset 0)",
                     "'late' (f32 ne [4], 16 bytes at offset 32) overlap");
}

TEST(GgufCorrupt, DuplicateTensorNames) {
  Bytes f = header(2, 0);
  f.tensor("w", {4}, ggml_type::F32, 0).tensor("w", {4}, ggml_type::F32, 32).data(64);
  EXPECT_MESSAGE_HAS(gguf_error(f), "bad.gguf", "duplicate tensor name 'w' (tensor #1)");
}

TEST(GgufCorrupt, HugeNamesAreCutInMessages) {
  Bytes f = header(1, 0);
  f.tensor(std::string(100000, 'x') + "\n", {4}, 99, 0).data(16);
  const std::string message = gguf_error(f);
  EXPECT_MESSAGE_HAS(message, "unknown ggml type 99", "...");
  EXPECT_LT(message.size(), 1000u);
}

TEST(GgufCorrupt, FixtureFieldsPatched) {
  const std::vector<uint8_t> good = fixture_bytes("tensors.gguf");
  ASSERT_GT(good.size(), 1000u);
  ASSERT_EQ(gguf_error(good), "<no error>");
  // "test.ids": i32 ne [9]; its info is name (8 + 8 bytes), n_dims, ne[0], type, offset.
  const size_t ids = tensor_info_at(good, "test.ids");
  const size_t n_dims_at = ids + 16, ne0_at = n_dims_at + 4, type_at = ne0_at + 8, offset_at = type_at + 4;
  auto patched = [&](auto&& change) {
    std::vector<uint8_t> b = good;
    change(b);
    return gguf_error(b, "tensors.gguf");
  };
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u32(b, type_at, 99); }), "tensors.gguf", "tensor 'test.ids'",
                     "unknown ggml type 99");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u32(b, type_at, ggml_type::Q8_0); }), "tensor 'test.ids'",
                     "q8_0 row of ne[0] = 9 values");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u32(b, type_at, ggml_type::F64); }), "'test.ids'", "overlap");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u64(b, offset_at, get_u64(good, offset_at) + 4); }), "tensor 'test.ids'",
                     "is not a multiple of the alignment 32");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u64(b, ne0_at, uint64_t(1) << 40); }), "tensor 'test.ids'",
                     "runs past the end of the data section");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u64(b, ne0_at, ~uint64_t(0)); }), "negative as int64");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u32(b, n_dims_at, 7); }), "'test.ids' has 7 dimensions");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u64(b, 8, 1000000); }), "tensor count 1000000", "impossible");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u64(b, 16, 4000); }), "metadata count 4000", "impossible");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { put_u64(b, 24, 1u << 30); }), "metadata key #0",
                     "string length 1073741824", "absurd");
  // "blk.0.attn_k.weight" renamed "blk.0.attn_q.weight": two tensors of one name.
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { b[tensor_info_at(good, "blk.0.attn_k.weight") + 8 + 11] = 'q'; }),
                     "duplicate tensor name 'blk.0.attn_q.weight'");
  EXPECT_MESSAGE_HAS(patched([&](auto& b) { b[4] = 1; }), "GGUF version 1 is not supported");
}

TEST(GgufCorrupt, FixtureTruncatedAtEveryLength) {
  for (const std::string name : {"tensors.gguf", "metadata.gguf"}) {
    const std::vector<uint8_t> good = fixture_bytes(name);
    GgufFile file = GgufFile::parse(good.data(), good.size(), name);
    // Bytes after the last value or tensor are padding, which a file may lack; any shorter cut is an error.
    size_t needed = 0;
    for (const GgufKv& kv : file.kvs()) needed = std::max(needed, size_t(kv.value + kv.value_bytes - good.data()));
    for (const GgufTensor& t : file.tensors()) needed = std::max(needed, size_t(t.data + t.nbytes - good.data()));
    ASSERT_GT(needed, 100u);
    for (size_t n = 0; n < good.size(); ++n) {
      std::vector<uint8_t> cut(good.begin(), good.begin() + n);  // exact size: nothing to read past
      const std::string message = gguf_error(cut, "cut.gguf");
      if (n >= needed) {
        EXPECT_EQ(message, "<no error>") << name << " cut to " << n;
      } else {
        EXPECT_MESSAGE_HAS(message, "cut.gguf", "truncated");
      }
    }
  }
}

TEST(GgufCorrupt, FixtureBytesOverwrittenOneByOne) {
  // Every byte of the header and tensor infos set to 0x00, 0xff and +1: each parse ends in success or a
  // ts::Error (no other exception, no crash; the fuzzer runs the same check with sanitizers).
  const std::vector<uint8_t> good = fixture_bytes("tensors.gguf");
  const size_t header_end = GgufFile::parse(good.data(), good.size(), "ok").data_offset();
  size_t errors = 0;
  for (size_t i = 0; i < header_end; ++i) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<uint8_t> b = good;
      b[i] = variant == 0 ? 0 : variant == 1 ? 0xff : uint8_t(b[i] + 1);
      try {
        GgufFile file = GgufFile::parse(b.data(), b.size(), "flipped.gguf");
        for (const GgufTensor& t : file.tensors()) {
          ASSERT_GE(t.data, b.data());
          ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
        }
        for (const GgufKv& kv : file.kvs()) file.value(kv.key);
      } catch (const ts::Error& e) {
        ++errors;
        EXPECT_MESSAGE_HAS(e.what(), "flipped.gguf");
      }
    }
  }
  EXPECT_GT(errors, header_end);  // about 1000 of the 2304 changes are refused
}

TEST(GgufCorrupt, ErrorsFromDiskNameThePath) {
  testing::ScratchDir dir;
  const std::string path = dir.file("broken.gguf");
  testing::write_bytes(path, one_tensor({4}, 99, 0, 16).b);
  EXPECT_MESSAGE_HAS(error_of([&] { GgufFile file(path); }), path, "tensor 'w'", "unknown ggml type 99");
  EXPECT_MESSAGE_HAS(error_of([&] { GgufFile file(dir.file("absent.gguf")); }), "absent.gguf", "cannot open");
  testing::write_bytes(dir.file("empty.gguf"), {});
  EXPECT_MESSAGE_HAS(error_of([&] { GgufFile file(dir.file("empty.gguf")); }), "empty.gguf", "truncated");
}

}  // namespace
}  // namespace ts::io
