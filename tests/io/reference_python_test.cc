// Cross-checks against an independent implementation: tests/io/reference_safetensors.py reads and writes the
// format by the reference implementation's rules and decodes values with torch. Our files must pass its stricter
// reader with the same values, and we must read the files it writes. Skipped where python3 with torch is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"

namespace ts::io {
namespace {

using json = nlohmann::json;

const char* kPython = "/usr/bin/python3";  // the Debian python that has torch (see engineering notes)

// Runs the reference script; skips the test if python3 or torch is missing.
json run_reference(const std::string& mode, const std::string& path, bool* skipped) {
  *skipped = false;
  if (!file_exists(kPython)) {
    *skipped = true;
    return {};
  }
  const std::string command =
      cat(kPython, " ", TS_SOURCE_DIR, "/tests/io/reference_safetensors.py ", mode, " '", path, "'");
  std::FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_TRUE(pipe) << command;
  if (!pipe) return {};
  std::string output;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0;) output.append(chunk, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    *skipped = true;
    return {};
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << " failed: " << output;
  return json::parse(output, nullptr, /*allow_exceptions=*/false);
}

// Compares a tensor we parsed with the reference's description {dtype, shape, values}.
void expect_same(const TensorRef& ours, const json& theirs) {
  SCOPED_TRACE(ours.name);
  EXPECT_EQ(dtype_name(ours.dtype), theirs.at("dtype").get<std::string>());
  EXPECT_EQ(ours.shape, theirs.at("shape").get<std::vector<int64_t>>());
  const json& values = theirs.at("values");
  ASSERT_EQ(int64_t(values.size()), ours.numel());
  if (ours.dtype == DType::F32 || ours.dtype == DType::F16 || ours.dtype == DType::BF16) {
    const std::vector<float> decoded = to_f32(ours);
    for (size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(decoded[i], float(values[i].get<double>())) << i;
  } else {
    const size_t elem = dtype_size(ours.dtype);
    for (size_t i = 0; i < values.size(); ++i) {
      int64_t v = 0;  // little-endian; the integer types used here (I64, U8, BOOL) need no sign extension
      std::memcpy(&v, ours.data + i * elem, elem);
      EXPECT_EQ(v, values[i].get<int64_t>()) << i;
    }
  }
}

TEST(SafetensorsReference, ReferenceReaderAcceptsOurFiles) {
  testing::ScratchDir dir;
  const std::string path = dir.file("ours.safetensors");
  const std::vector<float> embed = {0.1f, -1.25f, 3e-5f, 1024.f, -0.f, 7.5f};  // [2, 3]
  std::vector<uint16_t> embed_bf16, embed_f16;
  for (float v : embed) {
    embed_bf16.push_back(f32_to_bf16(v));
    embed_f16.push_back(f32_to_f16(v));
  }
  const std::vector<int64_t> ids = {-5, 0, 1ll << 40};
  const std::vector<uint8_t> mask = {1, 0, 1, 1};
  write_safetensors(path,
                    {{"embed.f32", DType::F32, {2, 3}, testing::as_bytes(embed.data(), 24)},
                     {"embed.bf16", DType::BF16, {3, 2}, testing::as_bytes(embed_bf16.data(), 12)},
                     {"embed.f16", DType::F16, {6}, testing::as_bytes(embed_f16.data(), 12)},
                     {"ids", DType::I64, {3}, testing::as_bytes(ids.data(), 24)},
                     {"mask", DType::Bool, {2, 2}, mask},
                     {"nothing", DType::U8, {0}, {}}},
                    {{"format", "pt"}, {"producer", "treespark"}});
  bool skipped = false;
  const json reference = run_reference("read", path, &skipped);
  if (skipped) GTEST_SKIP() << "python3 with torch not available";
  ASSERT_TRUE(reference.is_object()) << reference.dump();
  EXPECT_EQ(reference.at("metadata"), json({{"format", "pt"}, {"producer", "treespark"}}));
  SafetensorsFile file(path);
  ASSERT_EQ(reference.at("tensors").size(), file.tensors().size());
  for (const auto& [name, t] : file.tensors()) expect_same(t, reference.at("tensors").at(name));
  // And the values torch decoded are the ones we meant (bf16/f16 rounding done by ts::f32_to_*).
  const auto& bf16_values = reference.at("tensors").at("embed.bf16").at("values");
  for (size_t i = 0; i < embed.size(); ++i) EXPECT_NEAR(bf16_values[i].get<double>(), embed[i], std::fabs(embed[i]) / 128);
}

TEST(SafetensorsReference, WeReadReferenceFiles) {
  testing::ScratchDir dir;
  const std::string path = dir.file("theirs.safetensors");
  bool skipped = false;
  const json reference = run_reference("write", path, &skipped);
  if (skipped) GTEST_SKIP() << "python3 with torch not available";
  ASSERT_TRUE(reference.is_object()) << reference.dump();
  SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  ASSERT_EQ(reference.at("tensors").size(), file.tensors().size());
  for (const auto& [name, t] : file.tensors()) expect_same(t, reference.at("tensors").at(name));
  // Through the checkpoint API too, as the model loader will use it.
  Checkpoint ckpt(path);
  EXPECT_EQ(to_f32(ckpt.weight("model.embed", {3, 4})).size(), 12u);
  EXPECT_EQ(ckpt.tensor("model.embed").dtype, DType::BF16);
}

}  // namespace
}  // namespace ts::io
