// Parsing and validating GGUF files: header, metadata layout, tensor infos, data section.
//
// A GGUF file comes from outside, so every count and length is checked against the bytes left before it is
// used (no allocation or loop is sized by an unchecked field), and every size is computed with overflow checks.
// On any input the parser either returns tensors whose bytes lie inside the buffer, or throws ts::Error naming
// the file and the key or tensor. Metadata values are only located and validated here; gguf_metadata.cc decodes
// them on request. tests/io/fuzz/fuzz_gguf.cc checks this on random inputs.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"  // shape_to_string

namespace ts::io {

static_assert(std::endian::native == std::endian::little, "GGUF values are read as little-endian host values");

namespace {

// All types of ggml.h's enum ggml_type, with type_traits' type_name, blck_size and type_size (ggml.c,
// ggml-common.h; gguf-py's GGML_QUANT_SIZES agrees). Ids 4, 5, 31-33 and 36-38 were removed from ggml.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "f32", 1, 4},         {1, "f16", 1, 2},          {2, "q4_0", 32, 18},      {3, "q4_1", 32, 20},
    {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},       {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},
    {10, "q2_K", 256, 84},    {11, "q3_K", 256, 110},    {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
    {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},    {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74},
    {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},    {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},
    {22, "iq2_s", 256, 82},   {23, "iq4_xs", 256, 136},  {24, "i8", 1, 1},         {25, "i16", 1, 2},
    {26, "i32", 1, 4},        {27, "i64", 1, 8},         {28, "f64", 1, 8},        {29, "iq1_m", 256, 56},
    {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},    {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17},
    {40, "nvfp4", 64, 36},    {41, "q1_0", 128, 18},     {42, "q2_0", 64, 18},
};
constexpr uint32_t kGgmlTypeCount = 43;  // GGML_TYPE_COUNT

const char* removed_ggml_type(uint32_t id) {
  switch (id) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
    default: return nullptr;
  }
}

constexpr uint32_t kGgmlMaxDims = 4;  // GGML_MAX_DIMS
constexpr size_t kMaxShownChars = 160;
// The fewest bytes a record can take: a kv is key length (8) + a 1-byte key + type (4) + a 1-byte value; a
// tensor info is name length (8) + n_dims (4) + ggml type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 14;
constexpr uint64_t kMinTensorInfoBytes = 24;

// Names and keys as shown in messages: cut (a corrupt file can hold huge strings), control characters as '?'.
std::string shown(std::string_view s) {
  std::string out(s.substr(0, kMaxShownChars));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  return s.size() > kMaxShownChars ? out + "..." : out;
}

bool is_known_value_type(uint32_t id) { return id <= uint32_t(GgufType::F64); }

// Bytes of one scalar of a fixed-size type; 0 for String and Array.
uint64_t fixed_size(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::String: case GgufType::Array: return 0;
  }
  return 0;
}

// Bounds-checked little-endian reads over the whole file. `where` says what is being read, for messages.
class Reader {
 public:
  Reader(const uint8_t* bytes, size_t size, const std::string& source) : bytes_(bytes), size_(size), source_(source) {}

  size_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  std::string where;  // "key 'general.name'", "tensor #3 'blk.0.attn_q.weight'"

  const uint8_t* take(uint64_t n) {
    TS_CHECK(n <= left(), source_, ": truncated file: ", where, " needs ", n, " bytes at offset ", pos_,
             " but the file has ", size_, " bytes");
    const uint8_t* p = bytes_ + pos_;
    pos_ += size_t(n);
    return p;
  }
  template <typename T>
  T get() {
    T value;
    std::memcpy(&value, take(sizeof(T)), sizeof(T));
    return value;
  }
  std::string_view string() {
    const uint64_t n = get<uint64_t>();
    TS_CHECK(n <= GgufFile::kMaxStringBytes, source_, ": ", where, ": string length ", n, " is absurd (limit ",
             GgufFile::kMaxStringBytes, " bytes): corrupt file?");
    TS_CHECK(n <= left(), source_, ": ", where, ": string length ", n, " at offset ", pos_ - 8, " runs past the ",
             left(), " bytes left in the file (truncated or corrupt file?)");
    return std::string_view(reinterpret_cast<const char*>(take(n)), size_t(n));
  }
  GgufType value_type(const char* what) {
    const uint32_t id = get<uint32_t>();
    TS_CHECK(is_known_value_type(id), source_, ": ", where, ": unknown ", what, " ", id, " (GGUF types are 0..12)");
    return GgufType(id);
  }
  // An element count that the bytes left can hold at `min_bytes` each; anything more is a lying length field.
  uint64_t count(const char* what, uint64_t min_bytes) {
    const uint64_t n = get<uint64_t>();
    TS_CHECK(n <= left() / min_bytes, source_, ": ", where, ": ", what, " ", n, " needs at least ", min_bytes,
             " bytes each but only ", left(), " bytes are left in the file (truncated or corrupt file?)");
    return n;
  }

  // Checks one value of `type` and steps over it; `depth` counts the arrays around it.
  void skip_value(GgufType type, int depth) {
    if (type == GgufType::String) {
      string();
    } else if (type != GgufType::Array) {
      take(fixed_size(type));
    } else {
      TS_CHECK(depth < GgufFile::kMaxArrayDepth, source_, ": ", where, ": arrays nested deeper than ",
               GgufFile::kMaxArrayDepth, " levels (corrupt file?)");
      const GgufType element = value_type("array element type");
      skip_elements(element, depth + 1);
    }
  }
  // The count and elements of an array whose element type has been read.
  uint64_t skip_elements(GgufType element, int depth) {
    const uint64_t element_bytes = fixed_size(element);
    if (element_bytes > 0) {  // fixed-size elements: one bounds check for all
      const uint64_t n = count("array length", element_bytes);
      take(n * element_bytes);
      return n;
    }
    // A string takes at least its 8-byte length; an array its 4-byte type and 8-byte count.
    const uint64_t n = count("array length", element == GgufType::String ? 8 : 12);
    for (uint64_t i = 0; i < n; ++i) skip_value(element, depth);
    return n;
  }

 private:
  const uint8_t* bytes_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& source_;
};

// a * b, or false when it exceeds int64.
bool mul_fits(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out) && *out <= uint64_t(std::numeric_limits<int64_t>::max());
}

std::string describe(const GgufTensor& t) {
  return cat(ggml_type_name(t.ggml_type), " ne ", shape_to_string(t.ne), ", ", t.nbytes, " bytes at offset ",
             t.offset);
}

// --- parsing steps ---------------------------------------------------------------------------------------------

struct GgufHeader {
  uint32_t version = 0;
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
};

// The first 4 bytes must be "GGUF"; anything else is named with its bytes in hex.
void check_magic(const uint8_t* bytes, size_t size, const std::string& src) {
  TS_CHECK(size >= 4, src, ": file is ", size, " bytes, too short for the GGUF magic (truncated file?)");
  if (std::memcmp(bytes, "GGUF", 4) != 0) {
    std::string hex;
    for (int i = 0; i < 4; ++i) hex += cat(i ? " " : "", "0123456789abcdef"[bytes[i] >> 4], "0123456789abcdef"[bytes[i] & 15]);
    TS_FAIL(src, ": not a GGUF file: magic is '", shown(std::string_view(reinterpret_cast<const char*>(bytes), 4)),
            "' (bytes ", hex, "), expected 'GGUF'");
  }
}

// Steps over the magic and reads the version and the two record counts, each count checked against the bytes left
// at its record's smallest size.
GgufHeader read_header(Reader& in, const std::string& src) {
  in.take(4);
  in.where = "the header";
  GgufHeader h;
  h.version = in.get<uint32_t>();
  TS_CHECK(h.version != 0, src, ": unsupported GGUF version 0 (this reader reads versions 2 and 3)");
  TS_CHECK((h.version & 0xffffu) != 0, src, ": GGUF version field ", h.version,
           " looks byte-swapped: big-endian GGUF files are not supported");
  TS_CHECK(h.version != 1, src, ": GGUF version 1 is not supported (it predates 64-bit counts; reconvert the model)");
  TS_CHECK(h.version <= 3, src, ": unsupported GGUF version ", h.version, " (this reader reads versions 2 and 3)");

  h.n_tensors = in.get<uint64_t>();
  h.n_kv = in.get<uint64_t>();
  TS_CHECK(h.n_kv <= in.left() / kMinKvBytes, src, ": metadata count ", h.n_kv, " is impossible: the ", in.left(),
           " bytes after the header hold at most ", in.left() / kMinKvBytes, " (corrupt or truncated file?)");
  TS_CHECK(h.n_tensors <= in.left() / kMinTensorInfoBytes, src, ": tensor count ", h.n_tensors,
           " is impossible: the ", in.left(), " bytes after the header hold at most ",
           in.left() / kMinTensorInfoBytes, " (corrupt or truncated file?)");
  return h;
}

// Metadata record #i: its key and type, and where its value lies in `bytes` (located and checked, not decoded).
// The key goes into `kv_index` as `index`; a key seen before is an error.
GgufKv read_kv(Reader& in, const uint8_t* bytes, uint64_t i, size_t index, std::map<std::string, size_t>& kv_index,
               const std::string& src) {
  in.where = cat("metadata key #", i);
  const std::string_view key = in.string();
  TS_CHECK(!key.empty(), src, ": metadata key #", i, " is empty");
  in.where = cat("key '", shown(key), "'");
  TS_CHECK(kv_index.emplace(std::string(key), index).second, src, ": duplicate metadata key '", shown(key), "'");
  GgufKv kv;
  kv.key = std::string(key);
  kv.type = in.value_type("value type");
  if (kv.type == GgufType::Array) {
    kv.element_type = in.value_type("array element type");
    const size_t begin = in.pos();
    kv.count = in.skip_elements(kv.element_type, 1);
    kv.value = bytes + begin + 8;  // after the count
    kv.value_bytes = in.pos() - begin - 8;
  } else {
    const size_t begin = in.pos();
    in.skip_value(kv.type, 0);
    kv.value = bytes + begin;
    kv.value_bytes = in.pos() - begin;
  }
  return kv;
}

// Bytes of tensor `t` of ggml type `type` (`where` names it in messages): rows x cols values, each row a whole
// number of blocks; all of it must fit int64 / size_t.
size_t checked_nbytes(const GgufTensor& t, const GgmlTypeInfo& type, const std::string& where) {
  uint64_t rows = 1, numel = 0, row_bytes = 0, nbytes = 0;
  for (size_t d = 1; d < t.ne.size(); ++d)
    TS_CHECK(mul_fits(rows, uint64_t(t.ne[d]), &rows), where, ": ne ", shape_to_string(t.ne),
             " has more than 2^63 elements (corrupt file?)");
  const uint64_t cols = uint64_t(t.cols());
  TS_CHECK(mul_fits(rows, cols, &numel), where, ": ne ", shape_to_string(t.ne),
           " has more than 2^63 elements (corrupt file?)");
  TS_CHECK(cols % type.block_values == 0, where, ": a ", type.name, " row of ne[0] = ", cols,
           " values is not a whole number of ", type.block_values, "-value blocks");
  TS_CHECK(mul_fits(cols / type.block_values, type.block_bytes, &row_bytes) && mul_fits(rows, row_bytes, &nbytes),
           where, ": ", type.name, " ne ", shape_to_string(t.ne), " needs more than 2^63 bytes (corrupt file?)");
  return size_t(nbytes);
}

// Tensor info #i: name, shape, type, offset and size, each checked; the offset is checked against the data section
// later (place_tensors). The name goes into `tensor_index` as `index`; a name seen before is an error.
GgufTensor read_tensor_info(Reader& in, uint64_t i, size_t index, std::map<std::string, size_t>& tensor_index,
                            const std::string& src) {
  in.where = cat("tensor #", i, " name");
  GgufTensor t;
  t.name = std::string(in.string());
  const std::string where = cat(src, ": tensor '", shown(t.name), "'");
  in.where = cat("tensor #", i, " '", shown(t.name), "'");
  TS_CHECK(tensor_index.emplace(t.name, index).second, src, ": duplicate tensor name '", shown(t.name),
           "' (tensor #", i, ")");
  const uint32_t n_dims = in.get<uint32_t>();
  TS_CHECK(n_dims <= kGgmlMaxDims, where, " has ", n_dims, " dimensions (ggml allows at most ", kGgmlMaxDims, ")");
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t dim = in.get<uint64_t>();
    TS_CHECK(dim <= uint64_t(std::numeric_limits<int64_t>::max()), where, ": ne[", d, "] = ", dim,
             " is negative as int64 (corrupt file?)");
    t.ne.push_back(int64_t(dim));
  }
  t.ggml_type = in.get<uint32_t>();
  const GgmlTypeInfo* type = ggml_type_info(t.ggml_type);
  TS_CHECK(type != nullptr, where, " has ", ggml_type_name(t.ggml_type));
  t.offset = in.get<uint64_t>();
  t.nbytes = checked_nbytes(t, *type, where);
  return t;
}

// Points each tensor at its bytes: data_offset + its offset into `bytes`, after checking that the offset is a
// multiple of `alignment` and that its nbytes lie inside the data section of `data_size` bytes.
void place_tensors(std::vector<GgufTensor>& tensors, const uint8_t* bytes, uint64_t data_offset, uint64_t data_size,
                   uint32_t alignment, const std::string& src) {
  for (GgufTensor& t : tensors) {
    const std::string where = cat(src, ": tensor '", shown(t.name), "'");
    TS_CHECK(t.offset % alignment == 0, where, ": offset ", t.offset, " is not a multiple of the alignment ",
             alignment);
    TS_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset, where, " (", describe(t),
             ") runs past the end of the data section of ", data_size, " bytes (truncated file, or size not "
             "matching type and shape?)");
    t.data = bytes + data_offset + t.offset;
  }
}

// Tensors must not share bytes: a tensor larger than its slot (its shape or type disagreeing with the writer's
// layout) runs into the next one.
void check_no_overlap(const std::vector<GgufTensor>& tensors, const std::string& src) {
  std::vector<const GgufTensor*> by_offset;  // [non-empty tensors]
  for (const GgufTensor& t : tensors)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::stable_sort(by_offset.begin(), by_offset.end(),  // ties keep file order, for stable messages
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& prev = *by_offset[i - 1];
    const GgufTensor& next = *by_offset[i];
    TS_CHECK(next.offset >= prev.offset + prev.nbytes, src, ": tensors '", shown(prev.name), "' (", describe(prev),
             ") and '", shown(next.name), "' (", describe(next), ") overlap in the data section");
  }
}

}  // namespace

// --- ggml types ------------------------------------------------------------------------------------------------

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& info : kGgmlTypes)
    if (info.id == id) return &info;
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  if (const GgmlTypeInfo* info = ggml_type_info(id)) return info->name;
  if (const char* removed = removed_ggml_type(id)) return cat("unknown ggml type ", id, " (", removed, ", removed from ggml)");
  return cat("unknown ggml type ", id, " (ggml's types are 0..", kGgmlTypeCount - 1, ")");
}

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

// --- tensors ---------------------------------------------------------------------------------------------------

int64_t GgufTensor::cols() const { return ne.empty() ? 1 : ne[0]; }

int64_t GgufTensor::rows() const {
  int64_t n = 1;
  for (size_t d = 1; d < ne.size(); ++d) n *= ne[d];  // validated to fit int64
  return n;
}

int64_t GgufTensor::numel() const { return rows() * cols(); }

size_t GgufTensor::row_bytes() const {
  const GgmlTypeInfo* info = ggml_type_info(ggml_type);
  TS_CHECK(info != nullptr, "tensor '", shown(name), "': ", ggml_type_name(ggml_type));
  return size_t(cols() / info->block_values) * info->block_bytes;
}

std::vector<int64_t> GgufTensor::row_major_shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }

// --- parsing ---------------------------------------------------------------------------------------------------

GgufFile::GgufFile(const std::string& path) : file_(path), source_(path) {
  parse_bytes(file_.data(), file_.size());
}

GgufFile GgufFile::parse(const uint8_t* bytes, size_t size, const std::string& source) {
  GgufFile file;
  file.source_ = source;
  file.parse_bytes(bytes, size);
  return file;
}

void GgufFile::parse_bytes(const uint8_t* bytes, size_t size) {
  const std::string& src = source_;
  check_magic(bytes, size, src);
  Reader in(bytes, size, src);
  const GgufHeader header = read_header(in, src);
  version_ = header.version;

  // Metadata: each value is located and checked here; the getters decode it later.
  kvs_.reserve(size_t(header.n_kv));
  for (uint64_t i = 0; i < header.n_kv; ++i) kvs_.push_back(read_kv(in, bytes, i, kvs_.size(), kv_index_, src));

  if (has("general.alignment")) {
    const GgufKv& a = kv("general.alignment");
    TS_CHECK(a.type == GgufType::U32, src, ": key 'general.alignment' is ", a.type_string(), ", not u32");
    alignment_ = get_u32("general.alignment");
    TS_CHECK(alignment_ != 0 && (alignment_ & (alignment_ - 1)) == 0, src, ": general.alignment ", alignment_,
             " is not a power of two");
  }

  // Tensor infos: names, shapes and types are checked one by one; offsets once the data section is known.
  tensors_.reserve(size_t(header.n_tensors));
  for (uint64_t i = 0; i < header.n_tensors; ++i)
    tensors_.push_back(read_tensor_info(in, i, tensors_.size(), tensor_index_, src));

  // The data section starts at the next multiple of the alignment (a file without tensors may end before it).
  const uint64_t aligned = (uint64_t(in.pos()) + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty()) {
    TS_CHECK(aligned <= size, src, ": the data section would start at offset ", aligned, " (after the tensor infos",
             " and padding to ", alignment_, ") but the file has ", size, " bytes (truncated file?)");
  }
  data_offset_ = std::min<uint64_t>(aligned, size);
  const uint64_t data_size = size - data_offset_;
  place_tensors(tensors_, bytes, data_offset_, data_size, alignment_, src);
  check_no_overlap(tensors_, src);
}

bool GgufFile::has_tensor(const std::string& name) const { return tensor_index_.count(name) != 0; }

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* t = find_tensor(name);
  TS_CHECK(t != nullptr, source_, ": missing tensor '", shown(name), "'");
  return *t;
}

}  // namespace ts::io
