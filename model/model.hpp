#pragma once
// A loaded checkpoint directory: config, memory-mapped weights, tokenizer.
// The one entry point apps use to open a model; it validates that the parts
// agree with each other (tokenizer vs vocab size, tensors vs config).
#include <filesystem>
#include <memory>

#include "model/config.hpp"
#include "model/safetensors.hpp"
#include "model/tokenizer.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct model {
  std::filesystem::path dir;
  model_config config;
  std::unique_ptr<checkpoint> files;  // owns the mappings the weights point into
  model_weights weights;
  tokenizer tok;

  // Throws model_error naming the file and field at fault.
  static model load(const std::filesystem::path& dir);
};

}  // namespace specpipe
