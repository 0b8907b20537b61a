#include "model/presets.hpp"

namespace specpipe {
namespace {

model_config llama_shape(std::int64_t vocab, std::int64_t hidden, std::int64_t inter, std::int64_t layers,
                         std::int64_t heads, std::int64_t kv_heads, std::int64_t max_pos) {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = max_pos;
  c.torch_dtype = "bfloat16";
  return c;
}

}  // namespace

std::optional<model_config> preset_config(std::string_view name) {
  if (name == "llama3-8b") {
    // Meta-Llama-3.1-8B config.json.
    auto c = llama_shape(128256, 4096, 14336, 32, 32, 8, 131072);
    c.rms_norm_eps = 1e-5;
    c.rope.theta = 500000.0;
    c.rope.type = "llama3";
    c.rope.factor = 8.0;
    c.rope.low_freq_factor = 1.0;
    c.rope.high_freq_factor = 4.0;
    c.rope.original_max_position_embeddings = 8192;
    c.bos_token_ids = {128000};
    c.eos_token_ids = {128001, 128008, 128009};
    return c;
  }
  if (name == "llama2-7b") {
    auto c = llama_shape(32000, 4096, 11008, 32, 32, 32, 4096);
    c.rms_norm_eps = 1e-5;
    c.bos_token_ids = {1};
    c.eos_token_ids = {2};
    return c;
  }
  if (name == "mistral-7b") {
    auto c = llama_shape(32000, 4096, 14336, 32, 32, 8, 32768);
    c.model_type = "mistral";
    c.rms_norm_eps = 1e-5;
    c.rope.theta = 1e6;
    c.bos_token_ids = {1};
    c.eos_token_ids = {2};
    return c;
  }
  if (name == "tiny") {
    // Runs in seconds on the CPU backend; GQA 4:1 like the large models.
    auto c = llama_shape(4096, 512, 1376, 4, 8, 2, 8192);
    c.rope.theta = 10000.0;
    c.bos_token_ids = {1};
    c.eos_token_ids = {2};
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> preset_names() { return {"llama3-8b", "llama2-7b", "mistral-7b", "tiny"}; }

}  // namespace specpipe
