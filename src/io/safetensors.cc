// Parsing and validating safetensors headers.
//
// A checkpoint comes from outside, so every field is checked before a pointer into the data is formed: on any
// input the parser either returns tensors whose bytes lie inside the buffer, or throws ts::Error naming the file
// and the tensor. It never copies tensor data. tests/io/fuzz holds a libFuzzer target that checks this.
#include "io/safetensors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace ts::io {

namespace {

using json = nlohmann::json;

// A longer header is a corrupt length field, not a real checkpoint (real headers are a few MB at most).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// Names and parser messages are cut to this many characters in errors (a corrupt file can hold huge strings).
constexpr size_t kMaxShownChars = 160;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shown(const std::string& s) {
  if (s.size() <= kMaxShownChars) return s;
  return s.substr(0, kMaxShownChars) + "...";
}

// Parses the header JSON. nlohmann keeps only the last of repeated keys without telling, which would let two
// entries with one name (or two "data_offsets" in one entry) pass silently; a parse callback sees every key.
json parse_header_json(const uint8_t* begin, const uint8_t* end, const std::string& source) {
  std::vector<std::set<std::string>> keys_of_open_objects;  // [nesting depth]
  std::string top_level_key;  // the tensor whose entry is being parsed
  std::string duplicate_message;
  json::parser_callback_t on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_of_open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        if (keys_of_open_objects.empty() || !parsed.is_string()) break;
        const std::string& key = parsed.get_ref<const std::string&>();
        const bool is_top_level = keys_of_open_objects.size() == 1;
        const bool is_new = keys_of_open_objects.back().insert(key).second;
        if (!is_new && duplicate_message.empty()) {
          duplicate_message = is_top_level ? cat("duplicate tensor name '", shown(key), "'")
                                           : cat("tensor '", shown(top_level_key), "': duplicate key '", shown(key), "'");
        }
        if (is_top_level) top_level_key = key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(begin, end, on_event);
  } catch (const json::exception& e) {
    TS_FAIL(source, ": header is not valid JSON: ", shown(e.what()));
  }
  TS_CHECK(duplicate_message.empty(), source, ": ", duplicate_message);
  TS_CHECK(header.is_object(), source, ": header must be a JSON object but is ", header.type_name());
  return header;
}

// A JSON integer >= 0 that fits int64 (what both shapes and offsets must be).
bool as_count(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return *out <= uint64_t(std::numeric_limits<int64_t>::max());
}

std::vector<int64_t> parse_shape(const json& entry, const std::string& where) {
  auto it = entry.find("shape");
  TS_CHECK(it != entry.end(), where, ": missing 'shape'");
  TS_CHECK(it->is_array(), where, ": 'shape' must be an array of integers but is ", it->type_name());
  std::vector<int64_t> shape;
  shape.reserve(it->size());
  for (const json& dim : *it) {
    uint64_t value = 0;
    if (dim.is_number_integer() && !dim.is_number_unsigned()) TS_FAIL(where, ": negative dimension ", dim.get<int64_t>(), " in 'shape'");
    TS_CHECK(as_count(dim, &value), where, ": 'shape' must hold integers in [0, 2^63) but holds ", shown(dim.dump()));
    shape.push_back(int64_t(value));
  }
  return shape;
}

TensorRef parse_entry(const std::string& name, const json& entry, const uint8_t* data, uint64_t data_size,
                      const std::string& source) {
  const std::string where = cat(source, ": tensor '", shown(name), "'");
  TS_CHECK(entry.is_object(), where, ": entry must be an object {dtype, shape, data_offsets} but is ", entry.type_name());

  TensorRef t;
  t.name = name;
  t.file = source;

  auto dtype_it = entry.find("dtype");
  TS_CHECK(dtype_it != entry.end(), where, ": missing 'dtype'");
  TS_CHECK(dtype_it->is_string(), where, ": 'dtype' must be a string but is ", dtype_it->type_name());
  const std::string& dtype_text = dtype_it->get_ref<const std::string&>();
  TS_CHECK(dtype_from_name(dtype_text, &t.dtype), where, ": unknown dtype '", shown(dtype_text), "'");

  t.shape = parse_shape(entry, where);

  auto offsets_it = entry.find("data_offsets");
  TS_CHECK(offsets_it != entry.end(), where, ": missing 'data_offsets'");
  uint64_t begin = 0, end = 0;
  TS_CHECK(offsets_it->is_array() && offsets_it->size() == 2 && as_count((*offsets_it)[0], &begin) &&
               as_count((*offsets_it)[1], &end),
           where, ": 'data_offsets' must be [begin, end] with integers >= 0 but is ", shown(offsets_it->dump()));
  TS_CHECK(begin <= end, where, ": data_offsets [", begin, ", ", end, "] end before they begin");
  TS_CHECK(end <= data_size, where, ": data_offsets [", begin, ", ", end, "] go past the data section of ", data_size,
           " bytes (truncated file?)");

  // numel * dtype_size must equal end - begin; compute it without overflow first.
  uint64_t numel = 1;
  for (int64_t dim : t.shape) {
    TS_CHECK(!__builtin_mul_overflow(numel, uint64_t(dim), &numel), where, ": shape ", shape_to_string(t.shape),
             " has too many elements");
  }
  uint64_t expected_bytes = 0;
  TS_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &expected_bytes), where, ": shape ",
           shape_to_string(t.shape), " has too many elements");
  TS_CHECK(expected_bytes == end - begin, where, ": ", dtype_text, " ", shape_to_string(t.shape), " needs ",
           expected_bytes, " bytes but data_offsets [", begin, ", ", end, "] hold ", end - begin);

  t.data = data + begin;
  t.nbytes = size_t(end - begin);
  return t;
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& source) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;  // the reference reader treats it as optional
  TS_CHECK(value.is_object(), source, ": '__metadata__' must be an object of strings but is ", value.type_name());
  for (const auto& [key, item] : value.items()) {
    TS_CHECK(item.is_string(), source, ": '__metadata__' entry '", shown(key), "' must be a string but is ",
             item.type_name());
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// Tensors must not share bytes (a writer bug or a crafted file; aliasing weights would be silently wrong).
void check_no_overlap(const std::map<std::string, TensorRef>& tensors, const std::string& source) {
  std::vector<const TensorRef*> by_start;  // [non-empty tensors]
  for (const auto& [name, t] : tensors)
    if (t.nbytes > 0) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(), [](const TensorRef* a, const TensorRef* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_start.size(); ++i) {
    const TensorRef& prev = *by_start[i - 1];
    const TensorRef& next = *by_start[i];
    TS_CHECK(next.data >= prev.data + prev.nbytes, source, ": tensors '", shown(prev.name), "' and '",
             shown(next.name), "' overlap in the data section");
  }
}

}  // namespace

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

SafetensorsHeader SafetensorsFile::parse_header(const uint8_t* bytes, size_t size, const std::string& source) {
  TS_CHECK(size >= 8, source, ": file is ", size, " bytes, too short for the 8-byte header length (truncated file?)");
  const uint64_t header_bytes = read_u64_le(bytes);
  TS_CHECK(header_bytes <= kMaxHeaderBytes, source, ": header length ", header_bytes, " is absurd (limit ",
           kMaxHeaderBytes, " bytes): corrupt file?");
  TS_CHECK(header_bytes <= size - 8, source, ": header length ", header_bytes, " exceeds the ", size - 8,
           " bytes after the length field (truncated file?)");
  const json header = parse_header_json(bytes + 8, bytes + 8 + header_bytes, source);

  const uint8_t* data = bytes + 8 + header_bytes;  // [data_size] bytes; offsets are relative to it
  const uint64_t data_size = size - 8 - header_bytes;
  SafetensorsHeader result;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      result.metadata = parse_metadata(entry, source);
    } else {
      result.tensors.emplace(name, parse_entry(name, entry, data, data_size, source));
    }
  }
  check_no_overlap(result.tensors, source);
  return result;
}

std::map<std::string, TensorRef> SafetensorsFile::parse(const uint8_t* bytes, size_t size, const std::string& source) {
  return parse_header(bytes, size, source).tensors;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  SafetensorsHeader header = parse_header(file_.data(), file_.size(), path);
  tensors_ = std::move(header.tensors);
  metadata_ = std::move(header.metadata);
}

}  // namespace ts::io
