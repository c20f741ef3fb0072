// Shared helpers for model tests: random checkpoints in a per-test temp folder, plain forwards.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "model/random_checkpoint.h"
#include "model/target_model.h"

namespace ts::testing {

// The folders temp_dir made, removed when the test program exits (a test's models stay readable for its whole
// run; nothing is left behind in the build folder). TS_KEEP_TEST_DIRS=1 keeps them for debugging.
struct TempDirsRemovedAtExit {
  std::mutex mutex;
  std::vector<std::string> dirs;
  ~TempDirsRemovedAtExit() {
    if (std::getenv("TS_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ec;
    for (const std::string& d : dirs) std::filesystem::remove_all(d, ec);
  }
};

inline std::string temp_dir(const std::string& name) {
  static TempDirsRemovedAtExit made_dirs;
  std::string tmpl = std::string(TS_BINARY_DIR) + "/tmp_" + name + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back(0);
  const char* made = mkdtemp(buf.data());
  EXPECT_NE(made, nullptr);
  if (made != nullptr) {
    std::lock_guard<std::mutex> lock(made_dirs.mutex);
    made_dirs.dirs.push_back(made);
  }
  return made ? std::string(made) : tmpl;
}

// Logits of the last row after feeding `ids` through a fresh cache one forward at a time in chunks.
inline std::vector<float> run_sequence(TargetModel& m, const std::vector<int32_t>& ids) {
  KVCache cache = m.new_cache(1024);
  ForwardBatch b;
  b.tokens = ids;
  for (int i = 0; i < int(ids.size()); ++i) b.positions.push_back(i);
  for (int i = 0; i < int(ids.size()); ++i) b.logit_rows.push_back(i);
  ForwardResult r;
  m.forward(b, {&cache}, &r);
  cache.commit_all();
  return r.logits;  // [n, vocab]
}

}  // namespace ts::testing
