// Model folders: single file, direct path, sharded with an index; lookups by name, dtype and shape; and the
// errors for folders whose index and shards disagree.
#include <gtest/gtest.h>

#include <fstream>

#include "io/io_test_util.h"

namespace ts::io {
namespace {

TensorToWrite f32_tensor(const std::string& name, std::vector<int64_t> shape, float first) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<float> values(numel);  // [numel]
  for (int64_t i = 0; i < numel; ++i) values[i] = first + float(i);
  return TensorToWrite{name, DType::F32, std::move(shape), testing::as_bytes(values.data(), values.size() * 4)};
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

const std::string kShard1 = "model-00001-of-00002.safetensors";
const std::string kShard2 = "model-00002-of-00002.safetensors";

// embed [4, 2] and norm [2] in shard 1, head [2, 4] in shard 2.
void write_sharded(const testing::ScratchDir& dir) {
  write_safetensors(dir.file(kShard1), {f32_tensor("embed", {4, 2}, 0.f), f32_tensor("norm", {2}, 100.f)});
  write_safetensors(dir.file(kShard2), {f32_tensor("head", {2, 4}, 200.f)});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"metadata": {"total_size": 72}, "weight_map": {"embed": ")" + kShard1 + R"(", "norm": ")" + kShard1 +
                 R"(", "head": ")" + kShard2 + R"("}})");
}

TEST(Checkpoint, SingleFileFolder) {
  testing::ScratchDir dir;
  write_safetensors(dir.file("model.safetensors"),
                    {f32_tensor("w", {2, 3}, 1.f), TensorToWrite{"ids", DType::I32, {1}, {1, 0, 0, 0}}});
  Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.path(), dir.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"ids", "w"}));
  EXPECT_TRUE(ckpt.has("w"));
  EXPECT_FALSE(ckpt.has("v"));
  const TensorRef& w = ckpt.weight("w", {2, 3});
  EXPECT_EQ(to_f32(w), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ckpt.tensor("ids").dtype, DType::I32);
}

TEST(Checkpoint, DirectPathToFile) {
  testing::ScratchDir dir;
  write_safetensors(dir.file("draft.safetensors"), {f32_tensor("w", {3}, 5.f)});
  Checkpoint ckpt(dir.file("draft.safetensors"));
  EXPECT_EQ(to_f32(ckpt.weight("w", {3})), (std::vector<float>{5, 6, 7}));
}

TEST(Checkpoint, WeightErrorsSayExpectedAndActual) {
  testing::ScratchDir dir;
  write_safetensors(dir.file("model.safetensors"),
                    {f32_tensor("w", {2, 3}, 1.f), TensorToWrite{"ids", DType::I32, {1}, {1, 0, 0, 0}}});
  Checkpoint ckpt(dir.path());
  EXPECT_MESSAGE_HAS(testing::error_of([&] { ckpt.weight("w", {3, 2}); }),
                     "tensor 'w' in " + dir.path() + ": expected shape [3, 2] but file has [2, 3]");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { ckpt.weight("w", {6}); }), "expected shape [6] but file has [2, 3]");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { ckpt.weight("missing.weight", {2}); }),
                     "missing tensor 'missing.weight' in " + dir.path());
  EXPECT_MESSAGE_HAS(testing::error_of([&] { ckpt.tensor("nope"); }), "missing tensor 'nope'");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { ckpt.weight("ids", {1}); }), "tensor 'ids'",
                     "expected a float dtype (F32, F16, BF16) but file has I32");
}

TEST(Checkpoint, ShardedFolderWithIndex) {
  testing::ScratchDir dir;
  write_sharded(dir);
  Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"embed", "head", "norm"}));
  EXPECT_EQ(to_f32(ckpt.weight("norm", {2})), (std::vector<float>{100, 101}));
  EXPECT_EQ(to_f32(ckpt.weight("head", {2, 4}))[7], 207.f);
  EXPECT_EQ(ckpt.tensor("embed").file, dir.file(kShard1));
  EXPECT_EQ(ckpt.tensor("head").file, dir.file(kShard2));
  // The index file itself is also accepted as the path.
  Checkpoint by_index(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(by_index.names().size(), 3u);
}

TEST(Checkpoint, IndexTakesPrecedenceOverSingleFile) {
  testing::ScratchDir dir;
  write_sharded(dir);
  write_safetensors(dir.file("model.safetensors"), {f32_tensor("other", {1}, 0.f)});
  EXPECT_TRUE(Checkpoint(dir.path()).has("head"));
}

TEST(Checkpoint, MissingShardIsNamed) {
  testing::ScratchDir dir;
  write_sharded(dir);
  std::filesystem::remove(dir.file(kShard2));
  EXPECT_MESSAGE_HAS(testing::error_of([&] { Checkpoint ckpt(dir.path()); }), "shard '" + kShard2 + "'",
                     "model.safetensors.index.json", "is missing");
}

TEST(Checkpoint, IndexListsTensorAbsentFromShard) {
  testing::ScratchDir dir;
  write_sharded(dir);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed": ")" + kShard1 + R"(", "norm": ")" + kShard1 + R"(", "head": ")" + kShard2 +
                 R"(", "lm_head": ")" + kShard2 + R"("}})");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { Checkpoint ckpt(dir.path()); }), "tensor 'lm_head'",
                     "is not in its shard " + kShard2);
}

TEST(Checkpoint, ShardHoldsTensorTheIndexPlacesElsewhereOrOmits) {
  testing::ScratchDir dir;
  write_sharded(dir);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed": ")" + kShard1 + R"(", "norm": ")" + kShard2 + R"(", "head": ")" + kShard2 +
                 R"("}})");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { Checkpoint ckpt(dir.path()); }), "tensor 'norm'",
                     "places it in " + kShard2);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed": ")" + kShard1 + R"(", "head": ")" + kShard2 + R"("}})");
  EXPECT_MESSAGE_HAS(testing::error_of([&] { Checkpoint ckpt(dir.path()); }), "tensor 'norm'", "is not listed");
}

TEST(Checkpoint, BadIndexFiles) {
  testing::ScratchDir dir;
  const std::string index = dir.file("model.safetensors.index.json");
  auto error_for = [&](const std::string& text) {
    write_text(index, text);
    return testing::error_of([&] { Checkpoint ckpt(dir.path()); });
  };
  EXPECT_MESSAGE_HAS(error_for("{"), index, "not valid JSON");
  EXPECT_MESSAGE_HAS(error_for("{}"), "missing 'weight_map'");
  EXPECT_MESSAGE_HAS(error_for(R"({"weight_map": []})"), "'weight_map' must be an object");
  EXPECT_MESSAGE_HAS(error_for(R"({"weight_map": {"w": 1}})"), "shard of tensor 'w' must be a file name");
  EXPECT_MESSAGE_HAS(error_for(R"({"weight_map": {"w": "../model.safetensors"}})"), "in the same folder");
  EXPECT_MESSAGE_HAS(error_for(R"({"weight_map": {}})"), "lists no tensors");
}

TEST(Checkpoint, CorruptShardNamesTheShard) {
  testing::ScratchDir dir;
  write_sharded(dir);
  testing::write_bytes(dir.file(kShard2), {5, 0, 0, 0, 0, 0, 0, 0, '{', '}'});
  EXPECT_MESSAGE_HAS(testing::error_of([&] { Checkpoint ckpt(dir.path()); }), dir.file(kShard2), "header length");
}

TEST(Checkpoint, FolderWithoutCheckpoint) {
  testing::ScratchDir dir;
  EXPECT_MESSAGE_HAS(testing::error_of([&] { Checkpoint ckpt(dir.path()); }), "no model.safetensors", dir.path());
  EXPECT_MESSAGE_HAS(testing::error_of([&] { Checkpoint ckpt(dir.file("nothing.safetensors")); }), "cannot open",
                     "nothing.safetensors");
}

}  // namespace
}  // namespace ts::io
