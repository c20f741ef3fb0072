// GGUF metadata access: typed getters and generic decoding of the values gguf.cc located and validated.
//
// Values are decoded from the mapping on each call (a vocabulary of 150k tokens is not copied at open). The
// bytes were validated when the file was parsed, but the decoder still checks its bounds: a slip here must be an
// error, not a read past the value.
#include <cstring>
#include <limits>

#include "core/error.h"
#include "io/gguf.h"

namespace ts::io {

namespace {

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}

// Reads over one validated value: [p, end).
struct Decoder {
  const uint8_t* p;
  const uint8_t* end;

  const uint8_t* take(uint64_t n) {
    TS_CHECK(n <= uint64_t(end - p), "GGUF value decoder read past a validated value (a bug in gguf_metadata.cc)");
    const uint8_t* at = p;
    p += n;
    return at;
  }
  template <typename T>
  T get() {
    T value;
    std::memcpy(&value, take(sizeof(T)), sizeof(T));
    return value;
  }
  std::string string() {
    const uint64_t n = get<uint64_t>();
    return std::string(reinterpret_cast<const char*>(take(n)), size_t(n));
  }
  // Any integer type, exactly.
  __int128 integer(GgufType t) {
    switch (t) {
      case GgufType::U8: return get<uint8_t>();
      case GgufType::I8: return get<int8_t>();
      case GgufType::U16: return get<uint16_t>();
      case GgufType::I16: return get<int16_t>();
      case GgufType::U32: return get<uint32_t>();
      case GgufType::I32: return get<int32_t>();
      case GgufType::U64: return get<uint64_t>();
      case GgufType::I64: return get<int64_t>();
      default: TS_FAIL("GGUF decoder: ", gguf_type_name(t), " is not an integer type");
    }
  }
  GgufValue value(GgufType type) {
    GgufValue v;
    v.type = type;
    if (is_integer(type)) {
      const __int128 x = integer(type);
      if (type == GgufType::U8 || type == GgufType::U16 || type == GgufType::U32 || type == GgufType::U64)
        v.u = uint64_t(x);
      else
        v.i = int64_t(x);
    } else if (type == GgufType::F32) {
      v.f = get<float>();
    } else if (type == GgufType::F64) {
      v.f = get<double>();
    } else if (type == GgufType::Bool) {
      v.u = get<uint8_t>() != 0;  // as llama.cpp reads it: any non-zero byte is true
    } else if (type == GgufType::String) {
      v.s = string();
    } else {
      v.element_type = GgufType(get<uint32_t>());
      items(&v, get<uint64_t>());
    }
    return v;
  }
  void items(GgufValue* array, uint64_t count) {
    array->items.reserve(size_t(count));  // validated: count elements fit in the file
    for (uint64_t i = 0; i < count; ++i) array->items.push_back(value(array->element_type));
  }
};

Decoder decoder(const GgufKv& kv) { return Decoder{kv.value, kv.value + kv.value_bytes}; }

std::string int128_to_string(__int128 x) {
  if (x < 0) return "-" + int128_to_string(-x);
  std::string digits;
  do {
    digits.insert(digits.begin(), char('0' + int(x % 10)));
    x /= 10;
  } while (x > 0);
  return digits;
}

// A scalar integer key as T, if its value fits T.
template <typename T>
T integer_as(const GgufKv& kv, const std::string& source, const char* wanted) {
  TS_CHECK(is_integer(kv.type), source, ": key '", kv.key, "' is ", kv.type_string(), ", not ", wanted);
  const __int128 x = decoder(kv).integer(kv.type);
  TS_CHECK(x >= __int128(std::numeric_limits<T>::min()) && x <= __int128(std::numeric_limits<T>::max()), source,
           ": key '", kv.key, "' holds ", gguf_type_name(kv.type), " ", int128_to_string(x), ", which does not fit ",
           wanted);
  return T(x);
}

// The array behind `kv`, whose element type must satisfy `element_ok`.
template <typename Ok>
Decoder array_decoder(const GgufKv& kv, const std::string& source, Ok element_ok, const char* wanted) {
  TS_CHECK(kv.type == GgufType::Array && element_ok(kv.element_type), source, ": key '", kv.key, "' is ",
           kv.type_string(), ", not ", wanted);
  return decoder(kv);
}

}  // namespace

std::string GgufKv::type_string() const {
  if (type != GgufType::Array) return gguf_type_name(type);
  return cat("array[", count, "] of ", gguf_type_name(element_type));
}

bool GgufFile::has(const std::string& key) const { return kv_index_.count(key) != 0; }

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> keys;  // [kvs_.size()]
  keys.reserve(kvs_.size());
  for (const GgufKv& kv : kvs_) keys.push_back(kv.key);
  return keys;
}

const GgufKv& GgufFile::kv(const std::string& key) const {
  const auto it = kv_index_.find(key);
  TS_CHECK(it != kv_index_.end(), source_, ": missing key '", key, "'");
  return kvs_[it->second];
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufKv& v = kv(key);
  TS_CHECK(v.type == GgufType::String, source_, ": key '", key, "' is ", v.type_string(), ", not string");
  return decoder(v).string();
}

uint32_t GgufFile::get_u32(const std::string& key) const { return integer_as<uint32_t>(kv(key), source_, "u32"); }
int32_t GgufFile::get_i32(const std::string& key) const { return integer_as<int32_t>(kv(key), source_, "i32"); }
uint64_t GgufFile::get_u64(const std::string& key) const { return integer_as<uint64_t>(kv(key), source_, "u64"); }
int64_t GgufFile::get_i64(const std::string& key) const { return integer_as<int64_t>(kv(key), source_, "i64"); }

float GgufFile::get_f32(const std::string& key) const {
  const GgufKv& v = kv(key);
  TS_CHECK(v.type == GgufType::F32, source_, ": key '", key, "' is ", v.type_string(), ", not f32");
  return decoder(v).get<float>();
}

double GgufFile::get_f64(const std::string& key) const {
  const GgufKv& v = kv(key);
  TS_CHECK(v.type == GgufType::F32 || v.type == GgufType::F64, source_, ": key '", key, "' is ", v.type_string(),
           ", not f32 or f64");
  return v.type == GgufType::F32 ? double(decoder(v).get<float>()) : decoder(v).get<double>();
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufKv& v = kv(key);
  TS_CHECK(v.type == GgufType::Bool, source_, ": key '", key, "' is ", v.type_string(), ", not bool");
  return decoder(v).get<uint8_t>() != 0;
}

std::vector<std::string> GgufFile::get_strings(const std::string& key) const {
  const GgufKv& v = kv(key);
  Decoder in = array_decoder(v, source_, [](GgufType t) { return t == GgufType::String; }, "an array of strings");
  std::vector<std::string> out;  // [count]
  out.reserve(size_t(v.count));
  for (uint64_t i = 0; i < v.count; ++i) out.push_back(in.string());
  return out;
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  const GgufKv& v = kv(key);
  Decoder in = array_decoder(v, source_, is_integer, "an array of integers");
  std::vector<int64_t> out;  // [count]
  out.reserve(size_t(v.count));
  for (uint64_t i = 0; i < v.count; ++i) {
    const __int128 x = in.integer(v.element_type);
    TS_CHECK(x <= std::numeric_limits<int64_t>::max(), source_, ": key '", key, "' element ", i, " is ",
             int128_to_string(x), ", which does not fit i64");
    out.push_back(int64_t(x));
  }
  return out;
}

std::vector<float> GgufFile::get_floats(const std::string& key) const {
  const GgufKv& v = kv(key);
  Decoder in = array_decoder(v, source_, [](GgufType t) { return t == GgufType::F32; }, "an array of f32");
  std::vector<float> out(size_t(v.count));  // [count]
  if (!out.empty()) std::memcpy(out.data(), in.take(out.size() * sizeof(float)), out.size() * sizeof(float));
  return out;
}

std::vector<double> GgufFile::get_doubles(const std::string& key) const {
  const GgufKv& v = kv(key);
  Decoder in = array_decoder(v, source_, [](GgufType t) { return t == GgufType::F32 || t == GgufType::F64; },
                             "an array of f32 or f64");
  std::vector<double> out;  // [count]
  out.reserve(size_t(v.count));
  for (uint64_t i = 0; i < v.count; ++i)
    out.push_back(v.element_type == GgufType::F32 ? double(in.get<float>()) : in.get<double>());
  return out;
}

uint64_t GgufFile::array_size(const std::string& key) const {
  const GgufKv& v = kv(key);
  TS_CHECK(v.type == GgufType::Array, source_, ": key '", key, "' is ", v.type_string(), ", not an array");
  return v.count;
}

GgufValue GgufFile::value(const std::string& key) const {
  const GgufKv& v = kv(key);
  Decoder in = decoder(v);
  if (v.type != GgufType::Array) return in.value(v.type);
  GgufValue array;
  array.type = GgufType::Array;
  array.element_type = v.element_type;
  in.items(&array, v.count);
  return array;
}

}  // namespace ts::io
