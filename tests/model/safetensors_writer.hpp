#pragma once
// Test helpers that write safetensors files byte by byte, valid or corrupt on
// purpose, into a per-test temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace specpipe::test {

struct fake_tensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // written as F32; for other dtypes only the byte count matters
  std::size_t element_bytes = 4;

  std::size_t bytes() const {
    std::size_t n = element_bytes;
    for (auto d : shape) n *= std::size_t(d);
    return n;
  }
};

// Raw writer: the 8-byte little-endian length (which may lie), the header text,
// then the data bytes.
inline void write_raw(const std::filesystem::path& path, std::uint64_t header_len, const std::string& header,
                      const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((header_len >> (8 * i)) & 0xffu);
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(data.data(), std::streamsize(data.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// Lays the tensors out back to back (as the reference writer does) and pads
// the header with spaces to a multiple of 8. Values fill the data; missing
// values are zero. Returns the header JSON, for tests that then corrupt it.
inline boost::json::object header_for(const std::vector<fake_tensor>& tensors, std::string* data) {
  boost::json::object header;
  std::size_t offset = 0;
  data->clear();
  for (const auto& t : tensors) {
    boost::json::array shape;
    for (auto d : t.shape) shape.push_back(d);
    header[t.name] = {{"dtype", t.dtype}, {"shape", shape},
                      {"data_offsets", {offset, offset + t.bytes()}}};
    std::string bytes(t.bytes(), '\0');
    std::memcpy(bytes.data(), t.values.data(), std::min(bytes.size(), t.values.size() * sizeof(float)));
    *data += bytes;
    offset += t.bytes();
  }
  return header;
}

inline void write_header_and_data(const std::filesystem::path& path, const boost::json::object& header,
                                  const std::string& data) {
  std::string text = boost::json::serialize(header);
  while (text.size() % 8 != 0) text += ' ';
  write_raw(path, text.size(), text, data);
}

inline void write_safetensors(const std::filesystem::path& path, const std::vector<fake_tensor>& tensors,
                              const boost::json::object& metadata = {}) {
  std::string data;
  boost::json::object header = header_for(tensors, &data);
  if (!metadata.empty()) header["__metadata__"] = metadata;
  write_header_and_data(path, header, data);
}

// A fresh directory per test, removed afterwards.
class temp_dir_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Parametrized test names contain '/'.
    std::string name = "specpipe_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
                       std::to_string(::getpid());
    for (auto& c : name)
      if (c == '/') c = '_';
    dir_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

}  // namespace specpipe::test
