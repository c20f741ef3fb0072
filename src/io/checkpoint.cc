// Model folders: one model.safetensors, or model.safetensors.index.json naming the shard of every tensor (the
// Hugging Face layout). Every shard is memory-mapped once; tensors are looked up by name, dtype and shape.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace ts::io {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// weight_map: tensor name -> shard file name (a plain name inside the folder; no paths, so an index cannot point
// outside its folder).
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  json index;
  try {
    index = json::parse(read_text_file(index_path));
  } catch (const json::exception& e) {
    TS_FAIL(index_path, ": not valid JSON: ", e.what());
  }
  TS_CHECK(index.is_object(), index_path, ": expected a JSON object but found ", index.type_name());
  auto map_it = index.find("weight_map");
  TS_CHECK(map_it != index.end(), index_path, ": missing 'weight_map'");
  TS_CHECK(map_it->is_object(), index_path, ": 'weight_map' must be an object {tensor: shard file} but is ",
           map_it->type_name());
  std::map<std::string, std::string> shard_of;
  for (const auto& [name, shard] : map_it->items()) {
    TS_CHECK(shard.is_string(), index_path, ": shard of tensor '", name, "' must be a file name but is ",
             shard.type_name());
    const std::string& file = shard.get_ref<const std::string&>();
    TS_CHECK(!file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos, index_path,
             ": shard of tensor '", name, "' must be a file name in the same folder but is '", file, "'");
    shard_of.emplace(name, file);
  }
  return shard_of;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& path) : path_(path) {
  std::error_code ec;
  std::string index_path;
  std::string single_path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (file_exists((dir / kIndexFile).string())) {
      index_path = (dir / kIndexFile).string();
    } else if (file_exists((dir / kSingleFile).string())) {
      single_path = (dir / kSingleFile).string();
    } else {
      TS_FAIL("no ", kSingleFile, " or ", kIndexFile, " in ", path);
    }
  } else if (ends_with(path, ".index.json")) {
    index_path = path;
  } else {
    single_path = path;  // SafetensorsFile reports a missing file
  }

  if (!single_path.empty()) {
    files_.push_back(std::make_unique<SafetensorsFile>(single_path));
    for (const auto& [name, t] : files_.back()->tensors()) by_name_.emplace(name, &t);
    return;
  }

  const std::map<std::string, std::string> shard_of = read_weight_map(index_path);
  TS_CHECK(!shard_of.empty(), index_path, ": 'weight_map' lists no tensors");
  std::set<std::string> shards;
  for (const auto& [name, shard] : shard_of) shards.insert(shard);
  const fs::path dir = fs::path(index_path).parent_path();
  for (const std::string& shard : shards) {
    const std::string shard_path = (dir / shard).string();
    TS_CHECK(file_exists(shard_path), "shard '", shard, "' referenced by ", index_path, " is missing (", shard_path,
             ")");
    files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
    // The index and the shards must agree exactly: a tensor found elsewhere than the index says, or not listed
    // at all, means the folder mixes files from different checkpoints.
    for (const auto& [name, t] : files_.back()->tensors()) {
      auto listed = shard_of.find(name);
      TS_CHECK(listed != shard_of.end(), "tensor '", name, "' in shard ", shard_path, " is not listed in ",
               index_path);
      TS_CHECK(listed->second == shard, "tensor '", name, "' is in shard ", shard, " but ", index_path,
               " places it in ", listed->second);
      by_name_.emplace(name, &t);
    }
  }
  for (const auto& [name, shard] : shard_of) {
    TS_CHECK(by_name_.count(name), "tensor '", name, "' listed in ", index_path, " is not in its shard ", shard);
  }
}

bool Checkpoint::has(const std::string& name) const { return by_name_.count(name) > 0; }

const TensorRef& Checkpoint::tensor(const std::string& name) const {
  auto it = by_name_.find(name);
  TS_CHECK(it != by_name_.end(), "missing tensor '", name, "' in ", path_);
  return *it->second;
}

const TensorRef& Checkpoint::weight(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  const TensorRef& t = tensor(name);
  TS_CHECK(is_float(t.dtype), "tensor '", name, "' in ", path_, ": expected a float dtype (F32, F16, BF16) but file has ",
           dtype_name(t.dtype));
  TS_CHECK(t.shape == expected_shape, "tensor '", name, "' in ", path_, ": expected shape ",
           shape_to_string(expected_shape), " but file has ", shape_to_string(t.shape));
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) out.push_back(name);
  return out;
}

}  // namespace ts::io
