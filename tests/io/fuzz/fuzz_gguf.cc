// libFuzzer target for the GGUF reader (built and run by run_fuzz.sh ... gguf, not by the gtest glob).
//
// On any input, GgufFile::parse() must either throw ts::Error or return a file whose tensors lie inside the
// input, aligned and sized by type x shape without overlap, and whose every metadata value decodes (generically
// and through the typed getter of its type, the two agreeing). Anything else (a crash, another exception, a
// sanitizer report, a leak) is a bug. Accepted inputs are also parsed again cut one byte short.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"

namespace {

using ts::io::GgufFile;
using ts::io::GgufKv;
using ts::io::GgufTensor;
using ts::io::GgufType;
using ts::io::GgufValue;

void check(bool ok) {
  if (!ok) __builtin_trap();  // a broken invariant: let libFuzzer record the input
}

bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

void check_tensors(const GgufFile& file, const uint8_t* data, size_t size) {
  check(file.alignment() != 0 && (file.alignment() & (file.alignment() - 1)) == 0);
  check(file.data_offset() <= size);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [tensors] (offset, nbytes)
  for (const GgufTensor& t : file.tensors()) {
    const ts::io::GgmlTypeInfo* info = ts::io::ggml_type_info(t.ggml_type);
    check(info != nullptr);
    check(t.ne.size() <= 4);
    for (int64_t d : t.ne) check(d >= 0);
    check(t.cols() % info->block_values == 0);
    check(uint64_t(t.rows()) * t.row_bytes() == t.nbytes);
    check(t.offset % file.alignment() == 0);
    check(t.data == data + file.data_offset() + t.offset);
    check(t.data >= data && t.nbytes <= size && t.data <= data + size - t.nbytes);
    check(file.find_tensor(t.name) == &t);
    uint8_t sum = 0;  // touch every byte so AddressSanitizer would see an out-of-bounds pointer
    for (size_t i = 0; i < t.nbytes; ++i) sum ^= t.data[i];
    (void)sum;
    if (t.nbytes > 0) ranges.emplace_back(t.offset, t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) check(ranges[i].first >= ranges[i - 1].first + ranges[i - 1].second);
}

void check_metadata(const GgufFile& file) {
  for (const GgufKv& kv : file.kvs()) {
    check(file.has(kv.key) && &file.kv(kv.key) == &kv);
    const GgufValue v = file.value(kv.key);
    check(v.type == kv.type);
    switch (kv.type) {
      case GgufType::String: check(file.get_string(kv.key) == v.s); break;
      case GgufType::Bool: check(file.get_bool(kv.key) == (v.u != 0)); break;
      case GgufType::F32: check(double(file.get_f32(kv.key)) == v.f || v.f != v.f); break;  // NaN != NaN
      case GgufType::F64: check(file.get_f64(kv.key) == v.f || v.f != v.f); break;
      case GgufType::Array: {
        check(v.items.size() == kv.count && v.element_type == kv.element_type && file.array_size(kv.key) == kv.count);
        if (kv.element_type == GgufType::String) {
          const std::vector<std::string> strings = file.get_strings(kv.key);
          for (size_t i = 0; i < strings.size(); ++i) check(strings[i] == v.items[i].s);
        } else if (kv.element_type == GgufType::F32) {
          check(file.get_floats(kv.key).size() == kv.count && file.get_doubles(kv.key).size() == kv.count);
        } else if (is_signed(kv.element_type) || (is_unsigned(kv.element_type) && kv.element_type != GgufType::U64)) {
          const std::vector<int64_t> ints = file.get_ints(kv.key);
          for (size_t i = 0; i < ints.size(); ++i)
            check(ints[i] == (is_signed(kv.element_type) ? v.items[i].i : int64_t(v.items[i].u)));
        }
        break;
      }
      default:
        if (is_unsigned(kv.type)) check(file.get_u64(kv.key) == v.u);
        if (is_signed(kv.type)) check(file.get_i64(kv.key) == v.i);
    }
  }
}

void check_file(const GgufFile& file, const uint8_t* data, size_t size) {
  check(file.version() == 2 || file.version() == 3);
  check_tensors(file, data, size);
  check_metadata(file);
}

// Parses; on success checks the result. Only the parse may throw ts::Error: a getter throwing on an accepted
// file escapes, and libFuzzer reports it as a crash.
bool parse_and_check(const uint8_t* data, size_t size, const char* source) {
  std::optional<GgufFile> file;
  try {
    file.emplace(GgufFile::parse(data, size, source));
  } catch (const ts::Error&) {
    return false;  // refusing bad input is the expected outcome
  }
  check_file(*file, data, size);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!parse_and_check(data, size, "fuzz input") || size == 0) return 0;
  // Every accepted input again one byte short, from an exact-size copy that AddressSanitizer guards.
  std::vector<uint8_t> shorter(data, data + size - 1);  // [size - 1]
  parse_and_check(shorter.data(), shorter.size(), "truncated fuzz input");
  return 0;
}
