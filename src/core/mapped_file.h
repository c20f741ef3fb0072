// A read-only memory-mapped file (checkpoints are mapped, never copied whole into memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ts {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws ts::Error if it cannot be opened or mapped
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  // Unmaps the pages this process has touched (madvise MADV_DONTNEED) without unmapping the file: the bytes stay
  // readable, and a later read faults its page back in from the page cache (or the file). For a checkpoint whose
  // weights were copied into packed buffers at load: its touched pages would otherwise stay in the process's
  // resident memory beside the copies (a bf16 model's RSS twice its size). Returns false if madvise failed.
  bool drop_resident_pages();
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;  // [size_] bytes, or nullptr for an empty file
  size_t size_ = 0;
};

// Whole-file helpers for small text files (config.json, tokenizer.json).
std::string read_text_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace ts
