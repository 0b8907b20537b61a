#pragma once
// Read-only, memory-mapped safetensors checkpoints: one file, or shards listed
// in model.safetensors.index.json. Everything in the header is validated
// against the file (header length, JSON, dtype, shape x dtype = byte range,
// ranges inside the data section and not overlapping) before any tensor is used.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memory/tensor.hpp"

namespace specpipe {

struct tensor_entry {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;  // inside the mapping
  std::size_t bytes = 0;
  std::filesystem::path file;

  tensor_view view() const;  // contiguous host view of the mapped bytes
};

// "[64, 128]", for error messages.
std::string shape_text(const std::vector<std::int64_t>& shape);

class safetensors_file {
 public:
  // Maps and validates; throws model_error naming the file and the tensor.
  explicit safetensors_file(const std::filesystem::path& path);
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, tensor_entry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  // Aligned copies of the tensors that the file's layout leaves misaligned
  // for their dtype; empty for files written by the reference writer.
  std::vector<std::uint64_t> aligned_copy_;
  std::map<std::string, tensor_entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory, across shards.
class checkpoint {
 public:
  // `dir` holds model.safetensors, or model.safetensors.index.json and the
  // shards it names. Throws model_error.
  explicit checkpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  // nullptr when absent.
  const tensor_entry* find(const std::string& name) const;
  // Throws model_error naming the tensor (and the index file when sharded).
  const tensor_entry& get(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::filesystem::path dir_;
  std::filesystem::path index_file_;  // empty for a single-file checkpoint
  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::map<std::string, const tensor_entry*> index_;
};

}  // namespace specpipe
