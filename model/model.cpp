#include "model/model.hpp"

#include <system_error>

#include "model/model_error.hpp"

namespace specpipe {

model model::load(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw model_error(dir, "", "not a model directory (expected config.json, model.safetensors "
                               "and tokenizer.json inside)");
  model m{dir, load_model_config(dir / "config.json"), nullptr, {}, tokenizer::load(dir)};
  m.files = std::make_unique<checkpoint>(dir);
  m.weights = bind_weights(*m.files, m.config);
  if (m.tok.vocab_size() > m.config.vocab_size)
    throw model_error(dir / "tokenizer.json", "vocab",
                      "tokenizer has " + std::to_string(m.tok.vocab_size()) +
                          " tokens but config.json vocab_size is " +
                          std::to_string(m.config.vocab_size));
  return m;
}

}  // namespace specpipe
