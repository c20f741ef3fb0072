// Helpers shared by the io tests: scratch folders, raw safetensors bytes, and error-message checks.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

namespace ts::io::testing {

// A fresh folder under the build tree (or /tmp), removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
#ifdef TS_BINARY_DIR
    std::string base = std::string(TS_BINARY_DIR) + "/io_test_tmp";
#else
    std::string base = "/tmp";
#endif
    std::filesystem::create_directories(base);
    std::string pattern = base + "/st_XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    if (!made) throw std::runtime_error("mkdtemp failed in " + base);
    path_ = made;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(f) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  }
  std::fclose(f);
}

// 8-byte little-endian length, the header text as given (no padding), then `data` (the data section).
inline std::vector<uint8_t> raw_safetensors(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The same with `data_bytes` bytes of a recognisable pattern.
inline std::vector<uint8_t> raw_safetensors(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> data(data_bytes);
  for (size_t i = 0; i < data_bytes; ++i) data[i] = uint8_t(i * 7 + 1);
  return raw_safetensors(header, data);
}

// The message of the ts::Error thrown by `fn`, or "<no error>".
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ts::Error& e) {
    return e.what();
  }
  return "<no error>";
}

inline std::string parse_error(const std::vector<uint8_t>& bytes, const std::string& source = "bad.safetensors") {
  return error_of([&] { SafetensorsFile::parse(bytes.data(), bytes.size(), source); });
}

inline bool contains(const std::string& text, const std::string& phrase) { return text.find(phrase) != std::string::npos; }

inline std::vector<uint8_t> as_bytes(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

}  // namespace ts::io::testing

// Asserts that `message` contains every phrase given.
#define EXPECT_MESSAGE_HAS(message, ...)                                              \
  do {                                                                                \
    const std::string msg_ = (message);                                               \
    for (const std::string& phrase_ : std::vector<std::string>{__VA_ARGS__})          \
      EXPECT_TRUE(::ts::io::testing::contains(msg_, phrase_))                         \
          << "expected the message to contain \"" << phrase_ << "\" but it is: " << msg_; \
  } while (0)
