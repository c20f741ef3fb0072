// Reading GGUF files written by llama.cpp's gguf-py (tests/data/gguf, tools/py/make_gguf_fixtures.py): every
// key, value, tensor and data byte must agree with what gguf-py's own reader recorded in the JSON sidecars.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/io_test_util.h"

namespace ts::io {
namespace {

using json = nlohmann::json;
using testing::error_of;

std::string fixture(const std::string& name) { return std::string(TS_TEST_DATA) + "/gguf/" + name; }

json sidecar(const std::string& name) {
  std::ifstream in(fixture(name));
  EXPECT_TRUE(in.good()) << fixture(name) << " missing: run tools/py/make_gguf_fixtures.py";
  return json::parse(in);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// FNV-1a 64, as the generator computes it.
std::string fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

uint16_t u16_at(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// The first `n` values (in storage order), decoded by hand from the documented block layouts.
std::vector<double> first_values(const GgufTensor& t, size_t n) {
  std::vector<double> out;  // [min(n, numel)]
  n = std::min<size_t>(n, size_t(t.numel()));
  for (size_t i = 0; i < n; ++i) {
    switch (t.ggml_type) {
      case ggml_type::F32: { float v; std::memcpy(&v, t.data + 4 * i, 4); out.push_back(v); break; }
      case ggml_type::F16: out.push_back(f16_to_f32(u16_at(t.data + 2 * i))); break;
      case ggml_type::BF16: out.push_back(bf16_to_f32(u16_at(t.data + 2 * i))); break;
      case ggml_type::I32: { int32_t v; std::memcpy(&v, t.data + 4 * i, 4); out.push_back(v); break; }
      case ggml_type::Q8_0: {  // block: f16 d, int8 q[32]; x = d * q
        const uint8_t* block = t.data + 34 * (i / 32);
        out.push_back(f16_to_f32(u16_at(block)) * float(int8_t(block[2 + i % 32])));
        break;
      }
      case ggml_type::Q4_0: {  // block: f16 d, 16 bytes; x[j] = d * (low nibble - 8), x[j + 16] = d * (high - 8)
        const uint8_t* block = t.data + 18 * (i / 32);
        const size_t j = i % 32;
        const int q = j < 16 ? (block[2 + j] & 15) : (block[2 + j - 16] >> 4);
        out.push_back(f16_to_f32(u16_at(block)) * float(q - 8));
        break;
      }
      default: ADD_FAILURE() << "no decoder for " << ggml_type_name(t.ggml_type);
    }
  }
  return out;
}

void expect_value_eq(const GgufValue& v, const json& want, const std::string& where) {
  switch (v.type) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64:
      EXPECT_EQ(v.u, want.get<uint64_t>()) << where;
      break;
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64:
      EXPECT_EQ(v.i, want.get<int64_t>()) << where;
      break;
    case GgufType::F32:
      EXPECT_EQ(float(v.f), float(want.get<double>())) << where;
      break;
    case GgufType::F64:
      EXPECT_EQ(v.f, want.get<double>()) << where;
      break;
    case GgufType::Bool:
      EXPECT_EQ(v.u != 0, want.get<bool>()) << where;
      break;
    case GgufType::String:
      EXPECT_EQ(v.s, want.get<std::string>()) << where;
      break;
    case GgufType::Array:
      ASSERT_TRUE(want.is_array()) << where;
      ASSERT_EQ(v.items.size(), want.size()) << where;
      for (size_t i = 0; i < v.items.size(); ++i) {
        EXPECT_EQ(v.items[i].type, v.element_type) << where;
        expect_value_eq(v.items[i], want[i], where + "[" + std::to_string(i) + "]");
      }
      break;
  }
}

// Everything gguf-py saw in `name`.gguf, checked against treespark's reader.
void expect_matches_sidecar(const GgufFile& file, const json& want) {
  EXPECT_EQ(file.version(), want["version"].get<uint32_t>());
  EXPECT_EQ(file.alignment(), want["alignment"].get<uint32_t>());
  EXPECT_EQ(file.data_offset(), want["data_offset"].get<uint64_t>());

  const json& metadata = want["metadata"];
  ASSERT_EQ(file.kvs().size(), metadata.size());
  for (size_t i = 0; i < metadata.size(); ++i) {
    const std::string key = metadata[i]["key"];
    const GgufKv& kv = file.kvs()[i];
    EXPECT_EQ(kv.key, key) << "key #" << i << " out of file order";
    EXPECT_EQ(gguf_type_name(kv.type), metadata[i]["type"].get<std::string>()) << key;
    if (kv.type == GgufType::Array) {
      EXPECT_EQ(gguf_type_name(kv.element_type), metadata[i]["element_type"].get<std::string>()) << key;
      EXPECT_EQ(kv.count, metadata[i]["count"].get<uint64_t>()) << key;
      EXPECT_EQ(file.array_size(key), kv.count) << key;
    }
    expect_value_eq(file.value(key), metadata[i]["value"], key);
  }

  const json& tensors = want["tensors"];
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& w = tensors[i];
    const GgufTensor& t = file.tensors()[i];
    const std::string name = w["name"];
    EXPECT_EQ(t.name, name) << "tensor #" << i << " out of file order";
    EXPECT_EQ(&file.tensor(name), &t);
    EXPECT_EQ(t.ggml_type, w["ggml_type"].get<uint32_t>()) << name;
    EXPECT_EQ(ggml_type_name(t.ggml_type), w["type_name"].get<std::string>()) << name;
    EXPECT_EQ(t.ne, w["ne"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(t.offset, w["offset"].get<uint64_t>()) << name;
    EXPECT_EQ(t.offset % file.alignment(), 0u) << name;
    ASSERT_EQ(t.nbytes, w["nbytes"].get<size_t>()) << name;
    EXPECT_EQ(t.data - file.tensors()[0].data, std::ptrdiff_t(t.offset - file.tensors()[0].offset)) << name;
    EXPECT_EQ(fnv1a64(t.data, t.nbytes), w["fnv1a64"].get<std::string>()) << name << ": data bytes differ";
    const std::vector<double> want_values = w["first_values"];
    const std::vector<double> got = first_values(t, want_values.size());
    ASSERT_EQ(got.size(), want_values.size()) << name;
    for (size_t j = 0; j < got.size(); ++j) EXPECT_EQ(float(got[j]), float(want_values[j])) << name << " value " << j;
  }
}

TEST(GgufFixtures, MatchGgufPyView) {
  for (const std::string name : {"metadata", "tensors", "aligned64"}) {
    SCOPED_TRACE(name);
    const json want = sidecar(name + ".json");
    GgufFile file(fixture(name + ".gguf"));
    EXPECT_EQ(file.path(), fixture(name + ".gguf"));
    expect_matches_sidecar(file, want);
    // The same bytes parsed from memory give the same view.
    const std::vector<uint8_t> bytes = read_bytes(fixture(name + ".gguf"));
    ASSERT_EQ(bytes.size(), want["file_size"].get<size_t>());
    expect_matches_sidecar(GgufFile::parse(bytes.data(), bytes.size(), name), want);
  }
}

TEST(GgufFixtures, VersionTwoReadsTheSame) {
  // v2 and v3 differ only in big-endian support; a little-endian v3 file with version 2 is a valid v2 file.
  std::vector<uint8_t> bytes = read_bytes(fixture("tensors.gguf"));
  ASSERT_GT(bytes.size(), 8u);
  bytes[4] = 2;
  json want = sidecar("tensors.json");
  want["version"] = 2;
  expect_matches_sidecar(GgufFile::parse(bytes.data(), bytes.size(), "v2.gguf"), want);
}

TEST(GgufFixtures, GgmlTypeTableMatchesGgufPy) {
  const json types = sidecar("ggml_types.json");
  ASSERT_GE(types.size(), 30u);
  size_t known = 0;
  for (uint32_t id = 0; id < 256; ++id) known += ggml_type_info(id) != nullptr;
  EXPECT_EQ(known, types.size()) << "treespark knows ggml types that gguf-py does not, or the reverse";
  for (const json& t : types) {
    const GgmlTypeInfo* info = ggml_type_info(t["id"]);
    ASSERT_NE(info, nullptr) << t.dump();
    EXPECT_EQ(info->id, t["id"].get<uint32_t>());
    EXPECT_EQ(std::string(info->name), t["name"].get<std::string>());
    EXPECT_EQ(info->block_values, t["block_values"].get<uint32_t>()) << info->name;
    EXPECT_EQ(info->block_bytes, t["block_bytes"].get<uint32_t>()) << info->name;
  }
  EXPECT_EQ(ggml_type_info(31), nullptr);
  EXPECT_EQ(ggml_type_name(31), "unknown ggml type 31 (Q4_0_4_4, removed from ggml)");
  EXPECT_EQ(ggml_type_name(12345), "unknown ggml type 12345 (ggml's types are 0..42)");
}

TEST(GgufMetadata, TypedGetters) {
  GgufFile f(fixture("metadata.gguf"));
  EXPECT_TRUE(f.has("test.u8"));
  EXPECT_FALSE(f.has("test.absent"));
  EXPECT_EQ(f.keys().front(), "general.architecture");
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("test.string"), "h\u00e9llo, w\u00f6rld \u2713 \U0001F600");
  EXPECT_EQ(f.get_u32("test.u32"), 4000000000u);
  EXPECT_EQ(f.get_i32("test.i32"), -2000000000);
  EXPECT_EQ(f.get_u64("test.u64"), ~uint64_t(0));
  EXPECT_EQ(f.get_i64("test.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.get_f32("test.f32"), 3.140625f);
  EXPECT_EQ(f.get_f64("test.f64"), 2.718281828459045);
  EXPECT_EQ(f.get_f64("test.f32"), 3.140625);  // f32 widens to f64
  EXPECT_TRUE(f.get_bool("test.bool_true"));
  EXPECT_FALSE(f.get_bool("test.bool_false"));
  // Lossless integer conversions: any integer type whose value fits.
  EXPECT_EQ(f.get_u32("test.small_u8"), 7u);
  EXPECT_EQ(f.get_i32("test.small_u8"), 7);
  EXPECT_EQ(f.get_u64("test.u16"), 60000u);
  EXPECT_EQ(f.get_i64("test.i8"), -100);
  EXPECT_EQ(f.get_u32("test.small_i32"), 42u);
  EXPECT_EQ(f.get_u32("test.small_u64"), 12345u);
  EXPECT_EQ(f.get_i64("test.big_u64"), int64_t(1) << 40);
  EXPECT_EQ(f.get_i32("test.negative_i32"), -1);
}

TEST(GgufMetadata, TokenizerArrays) {
  GgufFile f(fixture("metadata.gguf"));
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 10u);
  EXPECT_EQ(tokens[3], "\u0120the");
  EXPECT_EQ(tokens[8], "\u4f60\u597d");
  EXPECT_EQ(f.get_strings("tokenizer.ggml.merges"), (std::vector<std::string>{"h e", "\u0120 t", "\u0120t he"}));
  EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type"), (std::vector<int64_t>{2, 3, 3, 1, 1, 1, 1, 1, 1, 6}));
  const std::vector<float> scores = f.get_floats("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 10u);
  EXPECT_EQ(scores[0], 0.f);
  EXPECT_EQ(scores[9], -2.25f);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.array_size("tokenizer.ggml.tokens"), 10u);
  EXPECT_EQ(f.get_strings("test.array.string"), (std::vector<std::string>{"", "a", "two words", "\u00fcnicode"}));
  EXPECT_EQ(f.get_ints("test.array.u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(f.get_ints("test.array.i64"),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(f.get_doubles("test.array.f64"), (std::vector<double>{0.1, -2.5e300}));
  EXPECT_EQ(f.get_doubles("test.array.f32"), (std::vector<double>{0.5, -1.25, double(1e-3f)}));
  const GgufValue nested = f.value("test.nested.depth3");
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.element_type, GgufType::Array);
  EXPECT_EQ(nested.items[0].items[1].items[0].i, 3);
  EXPECT_EQ(f.kv("test.nested.ints").type_string(), "array[3] of array");
}

TEST(GgufMetadata, ErrorsNameFileKeyAndTypes) {
  const std::string path = fixture("metadata.gguf");
  GgufFile f(path);
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_string("test.absent"); }), path, "missing key 'test.absent'");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_string("test.u32"); }), path, "key 'test.u32' is u32, not string");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_u32("test.string"); }), "key 'test.string' is string, not u32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_u32("test.f32"); }), "key 'test.f32' is f32, not u32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_u32("test.negative_i32"); }), "'test.negative_i32' holds i32 -1",
                     "does not fit u32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_u32("test.big_u64"); }), "holds u64 1099511627776, which does not fit u32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_i64("test.u64"); }), "holds u64 18446744073709551615", "does not fit i64");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_i32("test.u32"); }), "holds u32 4000000000", "does not fit i32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_u64("test.i64"); }), "holds i64 -9223372036854775808", "does not fit u64");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_f32("test.f64"); }), "key 'test.f64' is f64, not f32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_bool("test.u8"); }), "is u8, not bool");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_u32("tokenizer.ggml.tokens"); }),
                     "key 'tokenizer.ggml.tokens' is array[10] of string, not u32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_strings("tokenizer.ggml.token_type"); }),
                     "is array[10] of i32, not an array of strings");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_floats("test.array.f64"); }), "array[2] of f64, not an array of f32");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_ints("test.array.f32"); }), "not an array of integers");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_ints("test.nested.ints"); }), "array[3] of array, not an array of integers");
  EXPECT_MESSAGE_HAS(error_of([&] { f.get_ints("test.array.u64"); }), "'test.array.u64' element 1 is 18446744073709551615",
                     "does not fit i64");
  EXPECT_MESSAGE_HAS(error_of([&] { f.array_size("test.string"); }), "is string, not an array");
  EXPECT_MESSAGE_HAS(error_of([&] { f.tensor("output.weight"); }), path, "missing tensor 'output.weight'");
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufTensors, ShapesAndRowMajorView) {
  GgufFile f(fixture("tensors.gguf"));
  // numpy [5, 64] written by gguf-py: ne = [64, 5], 5 rows of 64 values.
  const GgufTensor& embd = f.tensor("token_embd.weight");
  EXPECT_EQ(embd.ne, (std::vector<int64_t>{64, 5}));
  EXPECT_EQ(embd.row_major_shape(), (std::vector<int64_t>{5, 64}));
  EXPECT_EQ(embd.rows(), 5);
  EXPECT_EQ(embd.cols(), 64);
  EXPECT_EQ(embd.numel(), 320);
  EXPECT_EQ(embd.row_bytes(), 256u);
  const GgufTensor& q8 = f.tensor("blk.0.ffn_up.weight");  // Q8_0: 2 blocks of 34 bytes per row
  EXPECT_EQ(q8.row_major_shape(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(q8.row_bytes(), 68u);
  EXPECT_EQ(q8.nbytes, 3 * 68u);
  const GgufTensor& q4 = f.tensor("blk.0.ffn_down.weight");  // Q4_0: 3 blocks of 18 bytes per row
  EXPECT_EQ(q4.row_bytes(), 54u);
  EXPECT_EQ(q4.rows(), 2);
  const GgufTensor& hyper = f.tensor("test.hyper");  // numpy [2, 1, 3, 2]
  EXPECT_EQ(hyper.ne, (std::vector<int64_t>{2, 3, 1, 2}));
  EXPECT_EQ(hyper.rows(), 6);
  EXPECT_EQ(hyper.row_major_shape(), (std::vector<int64_t>{2, 1, 3, 2}));
  EXPECT_TRUE(f.has_tensor("test.ids"));
  EXPECT_FALSE(f.has_tensor("test.id"));
}

TEST(GgufTensors, AlignmentIsHonoured) {
  GgufFile f(fixture("aligned64.gguf"));
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_u32("general.alignment"), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  for (const GgufTensor& t : f.tensors()) {
    EXPECT_EQ(t.offset % 64, 0u) << t.name;
    // The mapping is page-aligned, so the data pointers are aligned too.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name;
  }
}

}  // namespace
}  // namespace ts::io
