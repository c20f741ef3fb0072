// Every defect a safetensors file can have is an error naming the file and the tensor, with a phrase saying what
// is wrong. Each test starts from a valid file (checked to parse) and breaks one thing.
#include <gtest/gtest.h>

#include "io/io_test_util.h"

namespace ts::io {
namespace {

using testing::parse_error;
using testing::raw_safetensors;

// One valid F32 [2] tensor 'w' at bytes [0, 8).
const std::string kValidHeader = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

std::string entry_error(const std::string& entry_json, size_t data_bytes = 8) {
  return parse_error(raw_safetensors(R"({"w":)" + entry_json + "}", data_bytes));
}

TEST(SafetensorsCorrupt, ValidBaselineParses) {
  auto bytes = raw_safetensors(kValidHeader, 8);
  auto tensors = SafetensorsFile::parse(bytes.data(), bytes.size(), "ok.safetensors");
  ASSERT_EQ(tensors.size(), 1u);
  EXPECT_EQ(tensors.at("w").nbytes, 8u);
  EXPECT_EQ(tensors.at("w").data, bytes.data() + 8 + kValidHeader.size());
}

TEST(SafetensorsCorrupt, FileShorterThanLengthField) {
  std::vector<uint8_t> bytes = {1, 0, 0};
  EXPECT_MESSAGE_HAS(parse_error(bytes, "tiny.safetensors"), "tiny.safetensors", "3 bytes", "truncated");
  EXPECT_MESSAGE_HAS(parse_error({}, "empty.safetensors"), "empty.safetensors", "truncated");
}

TEST(SafetensorsCorrupt, HeaderLengthPastEndOfFile) {
  auto bytes = raw_safetensors(kValidHeader, 8);
  bytes.resize(8 + kValidHeader.size() - 5);  // cut inside the header
  EXPECT_MESSAGE_HAS(parse_error(bytes), "bad.safetensors", "header length", "truncated");
}

TEST(SafetensorsCorrupt, AbsurdHeaderLength) {
  auto bytes = raw_safetensors(kValidHeader, 8);
  bytes[5] = 0x10;  // length ~ 2^44
  EXPECT_MESSAGE_HAS(parse_error(bytes), "header length", "absurd");
  // Over 100 MB but otherwise plausible: still refused before anything is read.
  const uint64_t n = (100ull << 20) + 1;
  for (int i = 0; i < 8; ++i) bytes[i] = uint8_t(n >> (8 * i));
  EXPECT_MESSAGE_HAS(parse_error(bytes), "header length 104857601", "absurd");
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(R"({"w":{"dtype":"F32",)", 8)), "bad.safetensors",
                     "not valid JSON");
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors("", 8)), "not valid JSON");
  // Invalid UTF-8 inside a string.
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors("{\"w\xff\":1}", 0)), "not valid JSON");
}

TEST(SafetensorsCorrupt, HeaderNotObject) {
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors("[1, 2]", 0)), "must be a JSON object", "array");
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors("42      ", 0)), "must be a JSON object", "number");
}

TEST(SafetensorsCorrupt, EntryMissingFields) {
  EXPECT_MESSAGE_HAS(entry_error(R"({"shape":[2],"data_offsets":[0,8]})"), "bad.safetensors", "tensor 'w'",
                     "missing 'dtype'");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","data_offsets":[0,8]})"), "tensor 'w'", "missing 'shape'");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2]})"), "tensor 'w'", "missing 'data_offsets'");
}

TEST(SafetensorsCorrupt, EntryWrongJsonTypes) {
  EXPECT_MESSAGE_HAS(entry_error(R"("F32")"), "tensor 'w'", "entry must be an object", "string");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":32,"shape":[2],"data_offsets":[0,8]})"), "tensor 'w'",
                     "'dtype' must be a string", "number");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), "tensor 'w'",
                     "'shape' must be an array");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), "tensor 'w'",
                     "'shape' must hold integers");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"), "'shape' must hold integers");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), "tensor 'w'",
                     "'data_offsets' must be [begin, end]");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})"), "'data_offsets' must be");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":"0-8"})"), "'data_offsets' must be");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), "'data_offsets' must be");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.0]})"), "'data_offsets' must be");
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})"), "bad.safetensors",
                     "tensor 'w'", "unknown dtype 'F8_E4M3'");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), "unknown dtype 'f32'");
}

TEST(SafetensorsCorrupt, NegativeDimension) {
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[-2, -1],"data_offsets":[0,8]})"), "tensor 'w'",
                     "negative dimension -2");
}

TEST(SafetensorsCorrupt, ShapeProductOverflow) {
  // 2^62 * 8 overflows 64 bits; the wrapped product would be 0 and must not match the empty range [0, 0].
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"U8","shape":[4611686018427387904, 8],"data_offsets":[0,0]})", 0),
                     "tensor 'w'", "too many elements");
  // Elements fit but bytes do not: 2^62 F32 elements = 2^64 bytes, which wraps to 0.
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]})", 0),
                     "tensor 'w'", "too many elements");
  // A dimension beyond int64.
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]})", 0),
                     "'shape' must hold integers");
}

TEST(SafetensorsCorrupt, OffsetsReversedOrOutOfRange) {
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), "tensor 'w'",
                     "end before they begin");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})"), "tensor 'w'",
                     "past the data section of 8 bytes");
  // The data section cut short: the header is intact but the tensor bytes are not all there.
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(kValidHeader, 6)), "tensor 'w'", "past the data section",
                     "truncated");
}

TEST(SafetensorsCorrupt, SizeNotMatchingShapeAndDtype) {
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", 12), "tensor 'w'",
                     "F32 [3] needs 12 bytes but data_offsets [0, 8] hold 8");
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"BF16","shape":[2, 3],"data_offsets":[0,8]})"), "BF16 [2, 3] needs 12");
}

TEST(SafetensorsCorrupt, OverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(header, 12)), "bad.safetensors", "'a'", "'b'", "overlap");
  // Listed out of order: the check sorts by offset, so a later-named tensor at the start is still caught.
  const std::string reversed = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                               R"("b":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(reversed, 12)), "overlap");
  // Identical ranges (aliasing) overlap too.
  const std::string aliased = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(aliased, 8)), "overlap");
}

TEST(SafetensorsCorrupt, AdjacentAndEmptyTensorsDoNotOverlap) {
  // Touching ranges and empty tensors (which share no bytes) are valid; so is a gap between tensors.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[0, 5],"data_offsets":[4,4]},)"
                             R"("c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                             R"("d":{"dtype":"U8","shape":[2],"data_offsets":[14,16]}})";
  auto bytes = raw_safetensors(header, 16);
  auto tensors = SafetensorsFile::parse(bytes.data(), bytes.size(), "ok.safetensors");
  EXPECT_EQ(tensors.size(), 4u);
  EXPECT_EQ(tensors.at("b").nbytes, 0u);
  EXPECT_EQ(tensors.at("b").numel(), 0);
}

TEST(SafetensorsCorrupt, DuplicateTensorName) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(header, 16)), "bad.safetensors", "duplicate tensor name 'w'");
}

TEST(SafetensorsCorrupt, DuplicateKeyInsideEntry) {
  EXPECT_MESSAGE_HAS(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"data_offsets":[0,8]})"),
                     "tensor 'w'", "duplicate key 'data_offsets'");
  // Repeated keys in the metadata are also refused (which value was meant is unknowable).
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(R"({"__metadata__":{"k":"a","k":"b"}})", 0)), "duplicate key 'k'");
}

TEST(SafetensorsCorrupt, MetadataMustBeObjectOfStrings) {
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(R"({"__metadata__":["pt"]})", 0)), "bad.safetensors",
                     "'__metadata__' must be an object of strings");
  EXPECT_MESSAGE_HAS(parse_error(raw_safetensors(R"({"__metadata__":{"format":"pt","step":3}})", 0)),
                     "'__metadata__' entry 'step' must be a string", "number");
}

TEST(SafetensorsCorrupt, HugeNamesAreCutInMessages) {
  const std::string name(100000, 'x');
  const std::string message = parse_error(raw_safetensors("{\"" + name + "\":{\"dtype\":\"F99\"}}", 0));
  EXPECT_MESSAGE_HAS(message, "unknown dtype 'F99'", "...");
  EXPECT_LT(message.size(), 1000u);
}

TEST(SafetensorsCorrupt, ErrorsFromDiskNameThePath) {
  testing::ScratchDir dir;
  const std::string path = dir.file("broken.safetensors");
  testing::write_bytes(path, raw_safetensors(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8));
  EXPECT_MESSAGE_HAS(testing::error_of([&] { SafetensorsFile file(path); }), path, "tensor 'w'", "unknown dtype 'Q4'");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { SafetensorsFile file(dir.file("absent.safetensors")); }),
                     "absent.safetensors", "cannot open");
  testing::write_bytes(dir.file("empty.safetensors"), {});
  EXPECT_MESSAGE_HAS(testing::error_of([&] { SafetensorsFile file(dir.file("empty.safetensors")); }),
                     "empty.safetensors", "truncated");
}

}  // namespace
}  // namespace ts::io
