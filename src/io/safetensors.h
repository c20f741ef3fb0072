// safetensors checkpoints: parsing (memory-mapped, validated), sharded folders, and writing.
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b, e]}, ...,
// "__metadata__": {...}}, then the data section; offsets are relative to the data section.
// Every defect of a file (truncation, absurd header length, bad JSON, unknown dtype, offsets out of range or
// overlapping, size not matching shape x dtype, duplicate names) is a ts::Error naming the file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace ts::io {

struct TensorRef {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // [nbytes], points into the mapped file
  size_t nbytes = 0;
  std::string file;  // path of the file holding it (for messages)
  int64_t numel() const;
};

// Everything a safetensors header holds: the tensors (pointing into the parsed bytes) and "__metadata__".
struct SafetensorsHeader {
  std::map<std::string, TensorRef> tensors;
  std::map<std::string, std::string> metadata;
};

// One parsed safetensors file. `source` names the file in error messages.
class SafetensorsFile {
 public:
  // Parses and validates a whole file held in memory (used by the loader and by the fuzzer).
  static std::map<std::string, TensorRef> parse(const uint8_t* bytes, size_t size, const std::string& source);
  // The same, also returning "__metadata__".
  static SafetensorsHeader parse_header(const uint8_t* bytes, size_t size, const std::string& source);

  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorRef>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }
  void drop_resident_pages() { file_.drop_resident_pages(); }  // MappedFile::drop_resident_pages

 private:
  MappedFile file_;
  std::map<std::string, TensorRef> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A model folder: model.safetensors, or model.safetensors.index.json with shards; a single .safetensors path
// also works.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& path);

  bool has(const std::string& name) const;
  // Throws "missing tensor 'NAME' in DIR" when absent.
  const TensorRef& tensor(const std::string& name) const;
  // A weight of a float dtype (F32, F16, BF16) with exactly this shape; otherwise an error with expected vs actual.
  const TensorRef& weight(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  std::vector<std::string> names() const;
  const std::string& path() const { return path_; }
  // Every shard's MappedFile::drop_resident_pages: once a model has copied what it computes with. Tensors stay
  // readable.
  void drop_resident_pages() {
    for (auto& f : files_) f->drop_resident_pages();
  }

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorRef*> by_name_;
};

// "[2, 3]": how shapes are shown in messages.
std::string shape_to_string(const std::vector<int64_t>& shape);

// Converts a float tensor (F32, F16, BF16) to f32.
std::vector<float> to_f32(const TensorRef& t);

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // [numel * dtype_size]
};

// Writes a safetensors file (tensors sorted by name, 8-byte aligned header as the reference writer does).
// The file appears atomically (written beside it, then renamed).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The bytes write_safetensors writes, in memory (for tests and the fuzzer's round trip).
std::vector<uint8_t> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                           const std::map<std::string, std::string>& metadata = {});

}  // namespace ts::io
