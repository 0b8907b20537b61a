#include "model/safetensors.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "model/model_error.hpp"
#include "tests/model/safetensors_writer.hpp"

namespace specpipe {
namespace {

namespace json = boost::json;
using test::fake_tensor;
using ::testing::HasSubstr;

// Runs `f`, expects a model_error, returns it for the caller's checks.
template <class F>
model_error expect_model_error(F&& f) {
  try {
    f();
  } catch (const model_error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected model_error, got: " << e.what();
    return model_error("", "", "wrong exception");
  }
  ADD_FAILURE() << "expected model_error, nothing was thrown";
  return model_error("", "", "nothing thrown");
}

class safetensors_test : public test::temp_dir_test {
 protected:
  std::filesystem::path file(const std::string& name = "model.safetensors") const { return dir_ / name; }

  // Writes `header` (already laid out) and data, then expects opening to fail.
  model_error open_fails(const json::object& header, const std::string& data) {
    test::write_header_and_data(file(), header, data);
    return expect_model_error([&] { safetensors_file f(file()); });
  }

  std::vector<fake_tensor> two_tensors() const {
    return {{"a", "F32", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", "F32", {4}, {-1, -2, -3, -4}}};
  }
};

TEST_F(safetensors_test, maps_valid_file_and_views_its_values) {
  test::write_safetensors(file(), two_tensors(), {{"format", "pt"}});
  safetensors_file f(file());
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const tensor_entry& a = f.tensors().at("a");
  EXPECT_EQ(a.type, dtype::f32);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.bytes, 24u);
  EXPECT_EQ(a.file, file());
  const tensor_view v = a.view();
  EXPECT_EQ(v.rank, 2);
  EXPECT_EQ(v.dim(0), 2);
  EXPECT_EQ(v.dim(1), 3);
  EXPECT_TRUE(v.contiguous());
  EXPECT_EQ(v.strides[0], 3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v.as<const float>()[i], float(i + 1));
  const tensor_view b = f.tensors().at("b").view();
  EXPECT_EQ(b.as<const float>()[3], -4.0f);
  EXPECT_EQ(std::uintptr_t(b.data) % 4, 0u);
}

TEST_F(safetensors_test, accepts_all_supported_dtypes_scalars_and_empty_tensors) {
  test::write_safetensors(file(), {{"f16", "F16", {3}, {}, 2},
                                   {"bf16", "BF16", {2, 2}, {}, 2},
                                   {"i8", "I8", {5}, {}, 1},
                                   {"i32", "I32", {2}, {1.5f, -2.5f}, 4},
                                   {"u8", "U8", {1}, {}, 1},
                                   {"scalar", "F32", {}, {7.5f}},
                                   {"empty", "F32", {0, 4}, {}}});
  safetensors_file f(file());
  EXPECT_EQ(f.tensors().at("f16").type, dtype::f16);
  EXPECT_EQ(f.tensors().at("bf16").type, dtype::bf16);
  EXPECT_EQ(f.tensors().at("i8").type, dtype::i8);
  EXPECT_EQ(f.tensors().at("u8").type, dtype::u8);
  EXPECT_EQ(f.tensors().at("i32").type, dtype::i32);
  EXPECT_EQ(f.tensors().at("scalar").view().rank, 0);
  EXPECT_EQ(f.tensors().at("scalar").view().numel(), 1);
  EXPECT_EQ(f.tensors().at("empty").bytes, 0u);
  // Every tensor's data is aligned for its type, although this layout puts
  // the I32 at data offset 19.
  for (const auto& [name, e] : f.tensors())
    EXPECT_EQ(std::uintptr_t(e.data) % dtype_size(e.type), 0u) << name;
  EXPECT_EQ(f.tensors().at("scalar").view().as<const float>()[0], 7.5f);
  // The copy keeps the bytes (written as f32 bit patterns).
  float copied[2];
  std::memcpy(copied, f.tensors().at("i32").data, 8);
  EXPECT_EQ(copied[0], 1.5f);
  EXPECT_EQ(copied[1], -2.5f);
}

TEST_F(safetensors_test, copies_data_when_the_header_leaves_it_misaligned) {
  // An unpadded header of odd length puts the F32 data at an odd address.
  std::string data;
  const json::object header = test::header_for({{"x", "F32", {2}, {3.25f, -1.5f}}}, &data);
  std::string text = json::serialize(header) + " ";
  if (text.size() % 2 == 0) text += ' ';
  test::write_raw(file(), text.size(), text, data);
  safetensors_file f(file());
  const tensor_view v = f.tensors().at("x").view();
  EXPECT_EQ(std::uintptr_t(v.data) % 4, 0u);
  EXPECT_EQ(v.as<const float>()[0], 3.25f);
  EXPECT_EQ(v.as<const float>()[1], -1.5f);
}

TEST_F(safetensors_test, rejects_missing_file) {
  const auto e = expect_model_error([&] { safetensors_file f(file("nope.safetensors")); });
  EXPECT_EQ(e.file(), file("nope.safetensors"));
  EXPECT_THAT(e.what(), HasSubstr("cannot open"));
}

TEST_F(safetensors_test, rejects_file_shorter_than_length_field) {
  std::ofstream(file(), std::ios::binary) << "abcde";
  const auto e = expect_model_error([&] { safetensors_file f(file()); });
  EXPECT_THAT(e.what(), HasSubstr(file().string()));
  EXPECT_THAT(e.what(), HasSubstr("file has 5 bytes"));
}

TEST_F(safetensors_test, rejects_header_length_larger_than_file) {
  test::write_raw(file(), 8, "{}", "");
  const auto e = expect_model_error([&] { safetensors_file f(file()); });
  EXPECT_EQ(e.field(), "header");
  EXPECT_THAT(e.what(), HasSubstr("header says 8 bytes of header but file has 2"));
}

TEST_F(safetensors_test, rejects_truncated_header) {
  std::string data;
  const std::string text = json::serialize(test::header_for(two_tensors(), &data));
  // The length field is right but the file ends inside the header.
  test::write_raw(file(), text.size(), text.substr(0, text.size() / 2), "");
  const auto e = expect_model_error([&] { safetensors_file f(file()); });
  EXPECT_THAT(e.what(), HasSubstr("header says " + std::to_string(text.size()) + " bytes of header"));
}

TEST_F(safetensors_test, rejects_absurd_header_length) {
  // A length over the cap, in a file that really is that long (sparse).
  const std::uint64_t len = 100'000'001;
  test::write_raw(file(), len, "{}", "");
  std::filesystem::resize_file(file(), 8 + len);
  const auto e = expect_model_error([&] { safetensors_file f(file()); });
  EXPECT_THAT(e.what(), HasSubstr("header length 100000001 exceeds"));
}

TEST_F(safetensors_test, rejects_invalid_json_and_non_object_header) {
  test::write_raw(file(), 9, "{\"a\": [1,", "");
  auto e = expect_model_error([&] { safetensors_file f(file()); });
  EXPECT_EQ(e.field(), "header");
  EXPECT_THAT(e.what(), HasSubstr("invalid JSON"));

  test::write_raw(file(), 3, "[1]", "");
  e = expect_model_error([&] { safetensors_file f(file()); });
  EXPECT_THAT(e.what(), HasSubstr("expected a JSON object, found [1]"));
}

TEST_F(safetensors_test, rejects_truncated_data) {
  std::string data;
  const json::object header = test::header_for(two_tensors(), &data);
  data.resize(data.size() - 4);  // the file ends 4 bytes early
  const auto e = open_fails(header, data);
  EXPECT_EQ(e.field(), "b");
  EXPECT_THAT(e.what(), HasSubstr("data_offsets [24, 40] exceed the data section of 36 bytes"));
}

TEST_F(safetensors_test, rejects_offsets_outside_data_section) {
  std::string data;
  json::object header = test::header_for({{"w", "F16", {64, 32}, {}, 2}}, &data);
  data.resize(2048);
  header["w"].as_object()["data_offsets"] = {0, 4096};
  const auto e = open_fails(header, data);
  EXPECT_EQ(e.field(), "w");
  EXPECT_THAT(e.what(), HasSubstr("data_offsets [0, 4096] exceed the data section of 2048 bytes"));
}

TEST_F(safetensors_test, rejects_byte_count_that_does_not_match_shape) {
  std::string data;
  json::object header = test::header_for({{"w", "F16", {64, 32}, {}, 2}}, &data);
  header["w"].as_object()["shape"] = {64, 64};
  const auto e = open_fails(header, data);
  EXPECT_EQ(e.field(), "w");
  EXPECT_THAT(e.what(), HasSubstr("shape [64, 64] x F16 = 8192 bytes but data_offsets span 4096"));
}

TEST_F(safetensors_test, rejects_overlapping_ranges) {
  std::string data;
  json::object header = test::header_for({{"a", "F32", {4}}, {"b", "F32", {4}}, {"c", "F32", {4}}}, &data);
  header["c"].as_object()["data_offsets"] = {8, 24};
  const auto e = open_fails(header, data);
  EXPECT_THAT(e.what(), HasSubstr("overlap tensor"));
  EXPECT_THAT(e.what(), HasSubstr("[8, 24]"));
}

TEST_F(safetensors_test, rejects_begin_after_end_and_negative_or_bad_offsets) {
  std::string data;
  json::object header = test::header_for({{"a", "F32", {2}}}, &data);
  header["a"].as_object()["data_offsets"] = {8, 0};
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("has begin > end"));
  header["a"].as_object()["data_offsets"] = {-8, 0};
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("data_offsets: expected a non-negative integer, found -8"));
  header["a"].as_object()["data_offsets"] = {0};
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("data_offsets: expected [begin, end]"));
}

TEST_F(safetensors_test, rejects_unsupported_and_unknown_dtypes) {
  std::string data;
  json::object header = test::header_for({{"d", "F64", {2}, {}, 8}}, &data);
  auto e = open_fails(header, data);
  EXPECT_EQ(e.field(), "d");
  EXPECT_THAT(e.what(), HasSubstr("dtype F64 is unsupported (supported: F32, F16, BF16, I8, U8, I32)"));
  header = test::header_for({{"n", "I64", {2}, {}, 8}}, &data);
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("dtype I64 is unsupported"));
  header = test::header_for({{"m", "BOOL", {2}, {}, 1}}, &data);
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("dtype BOOL is unsupported"));
  header = test::header_for({{"q", "Q4_K", {2}, {}, 1}}, &data);
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("unknown dtype \"Q4_K\""));
}

TEST_F(safetensors_test, rejects_bad_shapes) {
  std::string data;
  json::object header = test::header_for({{"s", "F32", {2}}}, &data);
  header["s"].as_object()["shape"] = {-2};
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("shape: expected a non-negative integer, found -2"));
  header["s"].as_object()["shape"] = {1, 1, 1, 1, 2};
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("has rank 5, more than the 4 supported"));
  header["s"].as_object()["shape"] = {2.5};
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("shape: expected a non-negative integer, found 2.5"));
  header["s"].as_object()["shape"] = "2";
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("shape: missing or not an array"));
  header["s"].as_object()["shape"] = {std::int64_t(1) << 62, 16};
  EXPECT_THAT(open_fails(header, data).what(), HasSubstr("overflows"));
}

TEST_F(safetensors_test, rejects_non_string_metadata_and_non_object_entries) {
  std::string data;
  json::object header = test::header_for({{"a", "F32", {1}}}, &data);
  header["__metadata__"] = {{"format", 1}};
  auto e = open_fails(header, data);
  EXPECT_EQ(e.field(), "__metadata__.format");
  EXPECT_THAT(e.what(), HasSubstr("expected a string value, found 1"));
  header.erase("__metadata__");
  header["x"] = 3;
  e = open_fails(header, data);
  EXPECT_EQ(e.field(), "x");
  EXPECT_THAT(e.what(), HasSubstr("expected a tensor description object"));
}

// --- checkpoints ----------------------------------------------------------

class checkpoint_test : public test::temp_dir_test {
 protected:
  void write_index(const json::object& weight_map) {
    json::object index{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    std::ofstream(dir_ / "model.safetensors.index.json") << json::serialize(index);
  }
  void write_two_shards() {
    test::write_safetensors(dir_ / "model-00001-of-00002.safetensors", {{"a", "F32", {2}, {1, 2}}});
    test::write_safetensors(dir_ / "model-00002-of-00002.safetensors",
                            {{"b", "F32", {3}, {3, 4, 5}}, {"c", "F32", {1}, {6}}});
  }
  std::filesystem::path index_path() const { return dir_ / "model.safetensors.index.json"; }
};

TEST_F(checkpoint_test, single_file) {
  test::write_safetensors(dir_ / "model.safetensors", {{"x", "F32", {2}, {1, 2}}});
  checkpoint c(dir_);
  EXPECT_EQ(c.names(), std::vector<std::string>{"x"});
  ASSERT_NE(c.find("x"), nullptr);
  EXPECT_EQ(c.get("x").view().as<const float>()[1], 2.0f);
  EXPECT_EQ(c.find("y"), nullptr);
  const auto e = expect_model_error([&] { c.get("y"); });
  EXPECT_EQ(e.field(), "y");
  EXPECT_THAT(e.what(), HasSubstr("tensor not found"));
  EXPECT_THAT(e.what(), HasSubstr("model.safetensors"));
}

TEST_F(checkpoint_test, sharded_index) {
  write_two_shards();
  write_index({{"a", "model-00001-of-00002.safetensors"},
               {"b", "model-00002-of-00002.safetensors"},
               {"c", "model-00002-of-00002.safetensors"}});
  checkpoint c(dir_);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(c.get("a").file, dir_ / "model-00001-of-00002.safetensors");
  EXPECT_EQ(c.get("b").file, dir_ / "model-00002-of-00002.safetensors");
  EXPECT_EQ(c.get("c").view().as<const float>()[0], 6.0f);
  const auto e = expect_model_error([&] { c.get("zz"); });
  EXPECT_EQ(e.file(), index_path());
}

TEST_F(checkpoint_test, rejects_missing_shard) {
  write_two_shards();
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00003-of-00003.safetensors"}});
  const auto e = expect_model_error([&] { checkpoint c(dir_); });
  EXPECT_EQ(e.file(), index_path());
  EXPECT_EQ(e.field(), "weight_map.b");
  EXPECT_THAT(e.what(), HasSubstr("shard model-00003-of-00003.safetensors does not exist"));
}

TEST_F(checkpoint_test, rejects_tensor_missing_from_its_shard) {
  write_two_shards();
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"}});
  const auto e = expect_model_error([&] { checkpoint c(dir_); });
  EXPECT_EQ(e.field(), "weight_map.b");
  EXPECT_THAT(e.what(), HasSubstr("mapped to shard model-00001-of-00002.safetensors, which does not contain it"));
}

TEST_F(checkpoint_test, rejects_shard_names_that_escape_the_directory) {
  write_two_shards();
  for (const std::string bad : {"../model-00001-of-00002.safetensors", "/etc/passwd", "sub/../../x", ""}) {
    write_index({{"a", bad}});
    const auto e = expect_model_error([&] { checkpoint c(dir_); });
    EXPECT_EQ(e.field(), "weight_map.a") << bad;
    EXPECT_THAT(e.what(), HasSubstr("is not a file name inside the checkpoint directory")) << bad;
  }
}

TEST_F(checkpoint_test, rejects_bad_index_and_corrupt_shard) {
  write_two_shards();
  std::ofstream(index_path()) << "{\"weight_map\": [1]}";
  auto e = expect_model_error([&] { checkpoint c(dir_); });
  EXPECT_EQ(e.field(), "weight_map");
  std::ofstream(index_path()) << "{\"weight_map\": ";
  EXPECT_THAT(expect_model_error([&] { checkpoint c(dir_); }).what(), HasSubstr("invalid JSON"));
  // A shard that is itself corrupt reports the shard, not the index.
  std::ofstream(dir_ / "model-00002-of-00002.safetensors", std::ios::binary) << "xy";
  write_index({{"b", "model-00002-of-00002.safetensors"}});
  e = expect_model_error([&] { checkpoint c(dir_); });
  EXPECT_EQ(e.file(), dir_ / "model-00002-of-00002.safetensors");
}

TEST_F(checkpoint_test, rejects_directory_without_weights) {
  const auto e = expect_model_error([&] { checkpoint c(dir_); });
  EXPECT_THAT(e.what(), HasSubstr("no model.safetensors or model.safetensors.index.json in " + dir_.string()));
  const auto e2 = expect_model_error([&] { checkpoint c(dir_ / "missing"); });
  EXPECT_THAT(e2.what(), HasSubstr("not a checkpoint directory"));
}

TEST(checkpoint_fixture, sharded_transformers_checkpoint_loads_every_tensor) {
  const std::filesystem::path dir = std::filesystem::path(SPECPIPE_TEST_DATA_DIR) / "hf" / "llama2_sharded";
  checkpoint c(dir);
  // 2 layers x 9 tensors + embed + norm + lm_head.
  EXPECT_EQ(c.names().size(), 21u);
  std::set<std::filesystem::path> files;
  for (const auto& n : c.names()) files.insert(c.get(n).file);
  EXPECT_GT(files.size(), 1u) << "the fixture should be sharded";
}

}  // namespace
}  // namespace specpipe
