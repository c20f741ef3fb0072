// A loaded model copies every matrix into its own packed buffers, so the checkpoint's pages must leave the process's
// resident memory (MappedFile::drop_resident_pages at the end of TargetModel::load and Drafter::load): otherwise a
// bf16 model's RSS is twice its size, and a quantized one's the bf16 file plus the packed copy. The mapped bytes stay
// readable after the drop. Measured as RssFile in /proc/self/status.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "model/drafter.h"
#include "model/model_test_util.h"
#include "model/random_checkpoint.h"
#include "model/target_model.h"

namespace ts {
namespace {

// The process's resident file-backed memory in KiB (-1 if /proc is not there).
long rss_file_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}

long file_kib(const std::string& path) { return long(std::filesystem::file_size(path) / 1024); }

TEST(ResidentPages, MappedFileDropsTouchedPagesAndStaysReadable) {
  if (rss_file_kib() < 0) GTEST_SKIP() << "no /proc/self/status";
  const std::string path = testing::temp_dir("resident_pages") + "/bytes";
  std::vector<uint8_t> bytes(size_t(32) << 20);  // [32 MiB]
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 131 + (i >> 12));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  MappedFile f(path);
  const long before = rss_file_kib();
  ASSERT_EQ(0, std::memcmp(f.data(), bytes.data(), bytes.size()));  // touches every page
  const long touched = rss_file_kib();
  EXPECT_GT(touched - before, 28 * 1024) << "reading the mapping should make its pages resident";
  ASSERT_TRUE(f.drop_resident_pages());
  EXPECT_LT(rss_file_kib() - before, 2 * 1024);
  EXPECT_EQ(0, std::memcmp(f.data(), bytes.data(), bytes.size())) << "the bytes must stay readable";
}

ModelConfig sized_config() {
  ModelConfig c = tiny_qwen3_config(/*vocab=*/512, /*hidden=*/512, /*layers=*/4);
  c.intermediate_size = 1536;
  return c;
}

TEST(ResidentPages, LoadedModelsKeepNoCheckpointPagesResident) {
  if (rss_file_kib() < 0) GTEST_SKIP() << "no /proc/self/status";
  const std::string target_dir = testing::temp_dir("resident_target");
  write_random_model(target_dir, sized_config(), DType::BF16, 5);
  const DrafterConfig dc = tiny_drafter_config(/*vocab=*/512, /*hidden=*/512, /*layers=*/4, /*block=*/4);
  const std::string drafter_dir = testing::temp_dir("resident_drafter");
  write_random_drafter(drafter_dir, dc, DType::BF16, 6);
  // A first load pages in the loading code itself, which the measured loads then find resident.
  TargetModel::load(target_dir);
  for (const char* weights : {"native", "q4_0"}) {
    const long before = rss_file_kib();
    LoadOptions options;
    options.weights = parse_weight_scheme(weights);
    auto target = TargetModel::load(target_dir, options);
    auto drafter = Drafter::load(drafter_dir, target->config(), options.weights);
    const long grown = rss_file_kib() - before;
    const long files = file_kib(target_dir + "/model.safetensors") + file_kib(drafter_dir + "/model.safetensors");
    ASSERT_GT(files, 20 * 1024);
    EXPECT_LT(grown, files / 8) << weights << ": " << grown << " KiB of the checkpoints' " << files
                                << " KiB stayed resident after the load";
  }
}

}  // namespace
}  // namespace ts
