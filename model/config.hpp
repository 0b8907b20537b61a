#pragma once
// The model's shape and hyper-parameters, read from a Hugging Face config.json
// (Llama-2, Llama-3/3.1, Mistral). Both the classic `rope_theta`/`rope_scaling`
// keys and the newer `rope_parameters` object are accepted.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace specpipe {

struct rope_config {
  double theta = 10000.0;
  // "default" (no scaling), "linear" or "llama3" (Llama-3.1's frequency-band scaling).
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

struct model_config {
  std::string model_type;  // "llama" or "mistral"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  // Capped at sliding_window when the model has one (attention is full here,
  // which equals sliding-window attention only up to the window).
  std::int64_t max_position_embeddings = 0;
  // Mistral's sliding attention window; 0 when the config has none (null):
  // every token attends to the whole context.
  std::int64_t sliding_window = 0;
  double rms_norm_eps = 1e-5;  // parse_model_config defaults to transformers' 1e-6 when absent
  rope_config rope;
  bool tie_word_embeddings = false;
  std::vector<std::int32_t> bos_token_ids;  // usually one
  std::vector<std::int32_t> eos_token_ids;  // Llama-3 lists several
  std::string torch_dtype;                  // informational

  std::int64_t q_dim() const { return num_attention_heads * head_dim; }
  std::int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  std::int64_t group_size() const { return num_attention_heads / num_key_value_heads; }
};

// Reads and validates config.json; throws model_error naming the file and the
// field that is missing or invalid.
model_config load_model_config(const std::filesystem::path& config_json);
model_config parse_model_config(const std::string& json_text, const std::filesystem::path& origin);

// RoPE inverse frequencies for one head (head_dim / 2 values), with the
// configured scaling applied (HF's _compute_llama3_parameters for "llama3").
std::vector<float> rope_inv_freq(const model_config& c);

}  // namespace specpipe
