// Writing safetensors files in the layout the reference implementation reads: 8-byte little-endian header
// length, a JSON header padded with spaces so the data section starts 8-byte aligned, then the tensors packed
// back to back (in name order) with no gaps.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace ts::io {

namespace {

using json = nlohmann::json;

void check_writable(const TensorToWrite& t) {
  TS_CHECK(t.name != "__metadata__", "cannot write a tensor named '__metadata__' (reserved for metadata)");
  TS_CHECK(dtype_size(t.dtype) > 0, "tensor '", t.name, "': dtype has no size");
  uint64_t numel = 1;
  for (int64_t dim : t.shape) {
    TS_CHECK(dim >= 0, "tensor '", t.name, "': negative dimension in shape ", shape_to_string(t.shape));
    TS_CHECK(!__builtin_mul_overflow(numel, uint64_t(dim), &numel), "tensor '", t.name, "': shape ",
             shape_to_string(t.shape), " has too many elements");
  }
  uint64_t nbytes = 0;
  TS_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &nbytes) && nbytes == t.bytes.size(),
           "tensor '", t.name, "': ", dtype_name(t.dtype), " ", shape_to_string(t.shape), " needs ", numel, " x ",
           dtype_size(t.dtype), " bytes but ", t.bytes.size(), " were given");
}

// The sorted tensors and the bytes before the data section (length field + padded header).
struct Layout {
  std::vector<const TensorToWrite*> by_name;  // [tensors], sorted by name: the order of the data section
  std::string prefix;                         // [8 + header length]
  uint64_t data_bytes = 0;
};

Layout plan_layout(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata) {
  Layout layout;
  for (const TensorToWrite& t : tensors) {
    check_writable(t);
    layout.by_name.push_back(&t);
  }
  auto& by_name = layout.by_name;
  std::sort(by_name.begin(), by_name.end(),
            [](const TensorToWrite* a, const TensorToWrite* b) { return a->name < b->name; });
  for (size_t i = 1; i < by_name.size(); ++i)
    TS_CHECK(by_name[i - 1]->name != by_name[i]->name, "duplicate tensor name '", by_name[i]->name, "'");

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite* t : by_name) {
    header[t->name] = {{"dtype", dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  layout.data_bytes = offset;
  std::string header_text;
  try {
    header_text = header.dump();  // strict: names must be valid UTF-8, as the reference requires
  } catch (const json::exception& e) {
    TS_FAIL("cannot write safetensors header (names and metadata must be valid UTF-8): ", e.what());
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_bytes = header_text.size();
  for (int i = 0; i < 8; ++i) layout.prefix.push_back(char(uint8_t(header_bytes >> (8 * i))));
  layout.prefix += header_text;
  return layout;
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  const Layout layout = plan_layout(tensors, metadata);
  std::vector<uint8_t> out;  // [8 + header + data]
  out.reserve(layout.prefix.size() + layout.data_bytes);
  out.insert(out.end(), layout.prefix.begin(), layout.prefix.end());
  for (const TensorToWrite* t : layout.by_name) out.insert(out.end(), t->bytes.begin(), t->bytes.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const Layout layout = plan_layout(tensors, metadata);
  // Streamed tensor by tensor (no second copy of the weights in memory), beside the target and then renamed, so
  // a reader never sees a half-written checkpoint.
  const std::string temp_path = cat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(temp_path.c_str(), "wb");
  TS_CHECK(f, "cannot create ", temp_path, ": ", std::strerror(errno));
  bool written = std::fwrite(layout.prefix.data(), 1, layout.prefix.size(), f) == layout.prefix.size();
  for (const TensorToWrite* t : layout.by_name) {
    if (t->bytes.empty()) continue;  // an empty vector's data() may be null, which fwrite must not get
    written = written && std::fwrite(t->bytes.data(), 1, t->bytes.size(), f) == t->bytes.size();
  }
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(temp_path.c_str());
    TS_FAIL("cannot write ", temp_path, ": ", std::strerror(written ? errno : write_errno));
  }
  if (std::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temp_path.c_str());
    TS_FAIL("cannot rename ", temp_path, " to ", path, ": ", std::strerror(rename_errno));
  }
}

}  // namespace ts::io
