// Shared helpers for model tests: random checkpoints in a per-test temp folder, plain forwards.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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

// Runs tools/py/gguf_from_folder.py on `folder` into `out` with `args` (e.g. "--type q8_0"): "" on success, else
// why it could not; *skip_only tells a missing input (no /usr/bin/python3, or llama.cpp's source: the script's exit
// status 77), which a test skips on, from a failure.
inline std::string gguf_from_folder(const std::string& folder, const std::string& out, const std::string& args,
                                    bool* skip_only) {
  *skip_only = !std::filesystem::exists("/usr/bin/python3");
  if (*skip_only) return "no /usr/bin/python3";
  const std::string command = "/usr/bin/python3 '" + std::string(TS_SOURCE_DIR) + "/tools/py/gguf_from_folder.py' '" +
                              folder + "' '" + out + "' " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return "cannot run " + command;
  std::string output;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0;) output.append(chunk, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  *skip_only = WIFEXITED(status) && WEXITSTATUS(status) == 77;
  return command + " failed: " + output;
}

}  // namespace ts::testing
