// Writing then reading safetensors files, the byte layout the writer produces, a file laid out by hand the way the
// reference (Rust) writer lays it out, and to_f32 against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "io/io_test_util.h"

namespace ts::io {
namespace {

using testing::as_bytes;

template <typename T>
TensorToWrite make_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  return TensorToWrite{name, dtype, std::move(shape), as_bytes(values.data(), values.size() * sizeof(T))};
}

std::vector<TensorToWrite> sample_tensors() {
  std::vector<TensorToWrite> tensors;
  tensors.push_back(make_tensor<float>("model.norm.weight", DType::F32, {2, 3}, {1.f, -2.f, 3.5f, 0.f, 1e-3f, 7.f}));
  tensors.push_back(make_tensor<uint16_t>("a.bf16", DType::BF16, {4}, {0x3f80, 0xc020, 0x0000, 0x7f80}));
  tensors.push_back(make_tensor<uint16_t>("b.f16", DType::F16, {2, 2}, {0x3c00, 0xc500, 0x7bff, 0x0001}));
  tensors.push_back(make_tensor<int32_t>("c.ids", DType::I32, {3}, {7, -1, 123456}));
  tensors.push_back(make_tensor<uint8_t>("d.empty", DType::U8, {0, 4}, {}));
  tensors.push_back(make_tensor<double>("e.scalar", DType::F64, {}, {3.25}));
  tensors.push_back(make_tensor<uint8_t>("f.odd", DType::U8, {3}, {1, 2, 3}));  // leaves later offsets unaligned
  return tensors;
}

TEST(SafetensorsRoundTrip, WriteThenReadKeepsNamesDtypesShapesAndBytes) {
  testing::ScratchDir dir;
  const std::string path = dir.file("rt.safetensors");
  const auto written = sample_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "héllo"}};
  write_safetensors(path, written, metadata);

  SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.tensors().size(), written.size());
  for (const TensorToWrite& w : written) {
    SCOPED_TRACE(w.name);
    auto it = file.tensors().find(w.name);
    ASSERT_NE(it, file.tensors().end());
    const TensorRef& r = it->second;
    EXPECT_EQ(r.name, w.name);
    EXPECT_EQ(r.dtype, w.dtype);
    EXPECT_EQ(r.shape, w.shape);
    EXPECT_EQ(r.file, path);
    ASSERT_EQ(r.nbytes, w.bytes.size());
    EXPECT_EQ(std::vector<uint8_t>(r.data, r.data + r.nbytes), w.bytes);
  }
  EXPECT_EQ(file.tensors().at("e.scalar").numel(), 1);
  EXPECT_EQ(file.tensors().at("d.empty").numel(), 0);
}

TEST(SafetensorsRoundTrip, LayoutMatchesTheReferenceWriter) {
  const auto tensors = sample_tensors();
  const std::vector<uint8_t> bytes = serialize_safetensors(tensors, {{"format", "pt"}});
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  // Header padded with spaces so the data section starts 8-byte aligned.
  EXPECT_EQ(header_bytes % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + header_bytes);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << header;
  EXPECT_LT(header.size() - close - 1, 8u);
  EXPECT_NE(header.find(R"("__metadata__":{"format":"pt"})"), std::string::npos) << header;

  // Tensors packed back to back in name order, covering the data section exactly.
  auto parsed = SafetensorsFile::parse(bytes.data(), bytes.size(), "mem");
  const uint8_t* expected_start = bytes.data() + 8 + header_bytes;
  for (const auto& [name, t] : parsed) {  // std::map iterates in name order
    EXPECT_EQ(t.data, expected_start) << name;
    expected_start += t.nbytes;
  }
  EXPECT_EQ(expected_start, bytes.data() + bytes.size());
}

TEST(SafetensorsRoundTrip, WriterRefusesInconsistentTensors) {
  auto bad_size = make_tensor<float>("w", DType::F32, {3}, {1.f, 2.f});
  EXPECT_MESSAGE_HAS(testing::error_of([&] { serialize_safetensors({bad_size}); }), "tensor 'w'", "needs 3 x 4 bytes",
                     "8 were given");
  auto a = make_tensor<float>("w", DType::F32, {1}, {1.f});
  EXPECT_MESSAGE_HAS(testing::error_of([&] { serialize_safetensors({a, a}); }), "duplicate tensor name 'w'");
  auto reserved = make_tensor<float>("__metadata__", DType::F32, {1}, {1.f});
  EXPECT_MESSAGE_HAS(testing::error_of([&] { serialize_safetensors({reserved}); }), "reserved");
  auto negative = make_tensor<float>("n", DType::F32, {-1}, {});
  EXPECT_MESSAGE_HAS(testing::error_of([&] { serialize_safetensors({negative}); }), "negative dimension");
  auto bad_utf8 = make_tensor<float>("bad\xff", DType::F32, {1}, {1.f});
  EXPECT_MESSAGE_HAS(testing::error_of([&] { serialize_safetensors({bad_utf8}); }), "UTF-8");
}

TEST(SafetensorsRoundTrip, WriteLeavesNoTemporaryFiles) {
  testing::ScratchDir dir;
  write_safetensors(dir.file("a.safetensors"), sample_tensors());
  write_safetensors(dir.file("a.safetensors"), {make_tensor<float>("x", DType::F32, {1}, {2.f})});  // overwrite
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "a.safetensors");
  }
  EXPECT_EQ(files, 1u);
  SafetensorsFile file(dir.file("a.safetensors"));
  EXPECT_EQ(file.tensors().size(), 1u);
}

// Bytes laid out by hand as the reference writer does: metadata first, keys dtype/shape/data_offsets, tensors
// ordered by alignment then name, header padded with spaces. Independent of serialize_safetensors.
TEST(SafetensorsRoundTrip, ParsesReferenceLayoutWrittenByHand) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"embed":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
      R"("norm":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> data = {
      0x00, 0x00, 0x80, 0x3f,  // 1.0f
      0x00, 0x00, 0x20, 0xc0,  // -2.5f
      0x80, 0x3f,              // bf16 1.0
      0x49, 0x40,              // bf16 3.140625
      0x80, 0xbf,              // bf16 -1.0
  };
  auto bytes = testing::raw_safetensors(header, data);
  SafetensorsHeader parsed = SafetensorsFile::parse_header(bytes.data(), bytes.size(), "ref.safetensors");
  EXPECT_EQ(parsed.metadata.at("format"), "pt");
  ASSERT_EQ(parsed.tensors.size(), 2u);
  EXPECT_EQ(to_f32(parsed.tensors.at("embed")), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(to_f32(parsed.tensors.at("norm")), (std::vector<float>{1.0f, 3.140625f, -1.0f}));
  EXPECT_EQ(parsed.tensors.at("norm").shape, (std::vector<int64_t>{3}));
}

TEST(ToF32, ConvertsFloatDtypesFromUnalignedData) {
  // Values chosen so each conversion is exact and known: bf16/f16 bit patterns written out by hand.
  auto bytes = serialize_safetensors(sample_tensors());
  auto parsed = SafetensorsFile::parse(bytes.data(), bytes.size(), "mem");
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(to_f32(parsed.at("a.bf16")), (std::vector<float>{1.0f, -2.5f, 0.0f, inf}));
  EXPECT_EQ(to_f32(parsed.at("b.f16")), (std::vector<float>{1.0f, -5.0f, 65504.0f, std::ldexp(1.0f, -24)}));
  EXPECT_EQ(to_f32(parsed.at("model.norm.weight")), (std::vector<float>{1.f, -2.f, 3.5f, 0.f, 1e-3f, 7.f}));
  // model.norm.weight follows the 3-byte f.odd, so its data is not 4-byte aligned: to_f32 must not care.
  EXPECT_NE(reinterpret_cast<uintptr_t>(parsed.at("model.norm.weight").data) % 4, 0u);
}

TEST(ToF32, RefusesNonFloatDtypes) {
  auto bytes = serialize_safetensors(sample_tensors());
  auto parsed = SafetensorsFile::parse(bytes.data(), bytes.size(), "mem");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { to_f32(parsed.at("c.ids")); }), "tensor 'c.ids'",
                     "expected a float dtype", "I32");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { to_f32(parsed.at("e.scalar")); }), "F64");
}

}  // namespace
}  // namespace ts::io
