// GGUF files (llama.cpp's format): parsing (memory-mapped, validated), typed metadata access, tensor views.
//
// Format (GGUF v2/v3, little-endian; v1 and byte-swapped files are refused):
//   "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims, n_dims x u64 ne, u32 ggml_type, u64 offset },
//   padding up to general.alignment (u32, default 32), then the data section; tensor offsets are relative to it.
// A string is a u64 byte length then the bytes (no terminator); an array is u32 element type, u64 count, elements.
//
// Shapes: GGUF stores ggml's ne[], innermost (fastest) dimension first. For a weight used as y = W x, ne[0] is
// in_features and ne[1] out_features; the same bytes read row-major (numpy, safetensors, torch) have shape
// [ne[n-1], ..., ne[0]] (GgufTensor::row_major_shape()), i.e. [rows, cols] = [ne[1], ne[0]] for a matrix.
//
// Every defect (truncation, bad magic or version, counts or lengths beyond the file, duplicate keys or tensors,
// arrays nested too deep, unknown value or ggml types, shapes that overflow or cut a quantization block, offsets
// unaligned, overlapping or past the data section) is a ts::Error naming the file and the key or tensor. Which
// ggml types a model may use is decided by the model layer; this reader only needs their block sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace ts::io {

// --- ggml tensor types -----------------------------------------------------------------------------------------

// One ggml type: `block_values` values are stored in `block_bytes` bytes (1 and sizeof(T) for plain types).
struct GgmlTypeInfo {
  uint32_t id;            // GGML_TYPE_* (ggml.h)
  const char* name;       // ggml's type_name: "f32", "q8_0", "q4_K", "bf16", ...
  uint32_t block_values;  // values per block (QK); a row's ne[0] must be a multiple of it
  uint32_t block_bytes;   // bytes per block
};

// The type with this id, or nullptr for ids that are not (or are no longer) ggml types.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// "q8_0", or "unknown ggml type 31 (Q4_0_4_4, removed from ggml)" for ids ggml_type_info() does not know.
std::string ggml_type_name(uint32_t id);

// The ids of the types read most often (GGML_TYPE_*; the full list is in gguf.cc).
namespace ggml_type {
constexpr uint32_t F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10,
                   Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, I8 = 24, I16 = 25, I32 = 26, I64 = 27,
                   F64 = 28, BF16 = 30, MXFP4 = 39;
}  // namespace ggml_type

// --- metadata --------------------------------------------------------------------------------------------------

// GGUF value types (gguf_type), with the file's ids.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9, U64 = 10,
  I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType type);  // "u32", "string", "array", ...

// Where one metadata value lies in the file; values are decoded from the mapping when asked for.
struct GgufKv {
  std::string key;
  GgufType type = GgufType::U8;          // Array for arrays
  GgufType element_type = GgufType::U8;  // arrays only: the elements' type (Array for an array of arrays)
  uint64_t count = 1;                    // arrays only: number of elements; 1 for a scalar
  const uint8_t* value = nullptr;        // [value_bytes] the encoded value (after type fields), in the mapping
  size_t value_bytes = 0;
  std::string type_string() const;       // "u32", "array[5] of string"
};

// A decoded value of any type, for generic use (dumping, tests, nested arrays); typed getters are simpler.
struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t u = 0;        // U8, U16, U32, U64, and Bool (0 or 1)
  int64_t i = 0;         // I8, I16, I32, I64
  double f = 0;          // F32, F64
  std::string s;         // String
  GgufType element_type = GgufType::U8;  // Array: the elements' type
  std::vector<GgufValue> items;          // Array: [count]
};

// --- tensors ---------------------------------------------------------------------------------------------------

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;      // GGML_TYPE_* id; ggml_type_info(ggml_type) is never nullptr for a parsed tensor
  std::vector<int64_t> ne;     // [n_dims <= 4] GGUF order: ne[0] innermost (= in_features of a weight)
  uint64_t offset = 0;         // bytes from the start of the data section (a multiple of the alignment)
  const uint8_t* data = nullptr;  // [nbytes] in the mapping
  size_t nbytes = 0;           // numel / block_values * block_bytes

  int64_t numel() const;       // product of ne (1 for n_dims = 0)
  int64_t cols() const;        // ne[0] (1 for n_dims = 0): values per row
  int64_t rows() const;        // product of ne[1..] (1 for n_dims <= 1): numel = rows x cols
  size_t row_bytes() const;    // bytes per row: cols / block_values * block_bytes
  std::vector<int64_t> row_major_shape() const;  // [ne[n-1], ..., ne[0]]: the numpy / safetensors shape
};

// One parsed GGUF file: a memory-mapped file (constructor) or a caller's buffer (parse()).
class GgufFile {
 public:
  // Strings (keys, values, tensor names) longer than this are refused as corrupt; arrays are capped by what
  // the rest of the file can hold (real vocabularies are a few MB).
  static constexpr uint64_t kMaxStringBytes = 64ull << 20;
  // Arrays of arrays may nest this deep (an array of scalars has depth 1).
  static constexpr int kMaxArrayDepth = 3;
  static constexpr uint32_t kDefaultAlignment = 32;

  // Maps and parses the file; throws ts::Error naming `path` on any defect.
  explicit GgufFile(const std::string& path);
  // Parses bytes held by the caller, who keeps them alive as long as the result; `source` names them in errors.
  static GgufFile parse(const uint8_t* bytes, size_t size, const std::string& source);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::string& path() const { return source_; }
  uint32_t version() const { return version_; }      // 2 or 3
  uint32_t alignment() const { return alignment_; }  // general.alignment or 32
  uint64_t data_offset() const { return data_offset_; }  // data section start (<= file size; tensor offsets add)

  // Metadata. Every getter throws "FILE: missing key 'K'" or "FILE: key 'K' is TYPE, not WANTED".
  bool has(const std::string& key) const;
  const std::vector<GgufKv>& kvs() const { return kvs_; }  // in file order
  std::vector<std::string> keys() const;                   // in file order
  const GgufKv& kv(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  // Integers of any stored integer type whose value fits the requested type (u8 -> u32, i32 3 -> u64, ...);
  // a value that does not fit (i32 -1 as u32, u64 2^40 as u32) is an error naming it.
  uint32_t get_u32(const std::string& key) const;
  int32_t get_i32(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  float get_f32(const std::string& key) const;   // F32 only
  double get_f64(const std::string& key) const;  // F32 or F64
  bool get_bool(const std::string& key) const;
  // Arrays: of strings; of any integer type (values must fit int64); of F32; of F32 or F64.
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;
  std::vector<float> get_floats(const std::string& key) const;
  std::vector<double> get_doubles(const std::string& key) const;
  uint64_t array_size(const std::string& key) const;
  GgufValue value(const std::string& key) const;  // any value, decoded whole (nested arrays included)

  // Tensors.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  bool has_tensor(const std::string& name) const;
  const GgufTensor* find_tensor(const std::string& name) const;  // nullptr when absent
  const GgufTensor& tensor(const std::string& name) const;       // throws "FILE: missing tensor 'NAME'"
  // MappedFile::drop_resident_pages: once a model has copied what it computes with. Everything stays readable.
  void drop_resident_pages() { file_.drop_resident_pages(); }

 private:
  GgufFile() = default;
  void parse_bytes(const uint8_t* bytes, size_t size);  // gguf.cc; the getters are in gguf_metadata.cc

  MappedFile file_;  // empty for parse()
  std::string source_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::map<std::string, size_t> kv_index_;  // key -> index in kvs_
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;  // name -> index in tensors_
};

}  // namespace ts::io
