#include <algorithm>
#include "model/config.hpp"

#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>

#include "model/model_error.hpp"

namespace specpipe {
namespace {

namespace json = boost::json;

// Reads fields of one JSON object and reports errors against `file` with the
// field's dotted path ("rope_scaling.factor"), so that every message says
// which key is wrong, what was expected and what was found.
class field_reader {
 public:
  field_reader(const json::object& obj, const std::filesystem::path& file, std::string prefix = {})
      : obj_(obj), file_(file), prefix_(std::move(prefix)) {}

  std::string path(std::string_view key) const { return prefix_ + std::string(key); }

  // nullptr when the key is absent or null (HF writes null for "use the default").
  const json::value* find(std::string_view key) const {
    const json::value* v = obj_.if_contains(key);
    return (v && !v->is_null()) ? v : nullptr;
  }
  bool has(std::string_view key) const { return find(key) != nullptr; }

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw model_error(file_, path(key), what);
  }

  static std::string found(const json::value& v) {
    // Boost.JSON prints 32.5 as 3.25E1; users wrote 32.5.
    if (v.is_double()) {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, v.get_double());
      return std::string(buf, r.ptr);
    }
    std::string s = json::serialize(v);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  }

  std::int64_t integer(std::string_view key, const json::value& v) const {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64()) {
      if (v.get_uint64() > std::uint64_t(INT64_MAX)) fail(key, "integer " + found(v) + " is too large");
      return std::int64_t(v.get_uint64());
    }
    // Python's json writes 8192.0 for floats that hold integers; accept those.
    if (v.is_double() && std::isfinite(v.get_double()) && std::floor(v.get_double()) == v.get_double() &&
        std::fabs(v.get_double()) < 9.0e15)
      return std::int64_t(v.get_double());
    fail(key, "expected an integer, found " + found(v));
  }

  std::int64_t required_positive(std::string_view key) const {
    const json::value* v = find(key);
    if (!v) fail(key, "missing required field (expected a positive integer)");
    return positive(key, *v);
  }

  std::int64_t optional_positive(std::string_view key, std::int64_t fallback) const {
    const json::value* v = find(key);
    return v ? positive(key, *v) : fallback;
  }

  std::int64_t positive(std::string_view key, const json::value& v) const {
    const std::int64_t n = integer(key, v);
    if (n <= 0) fail(key, "expected a positive integer, found " + std::to_string(n));
    return n;
  }

  double number(std::string_view key, const json::value& v) const {
    double d = 0;
    if (v.is_double()) d = v.get_double();
    else if (v.is_int64()) d = double(v.get_int64());
    else if (v.is_uint64()) d = double(v.get_uint64());
    else fail(key, "expected a number, found " + found(v));
    if (!std::isfinite(d)) fail(key, "expected a finite number, found " + found(v));
    return d;
  }

  double optional_positive_number(std::string_view key, double fallback) const {
    const json::value* v = find(key);
    if (!v) return fallback;
    const double d = number(key, *v);
    if (d <= 0) fail(key, "expected a positive number, found " + found(*v));
    return d;
  }

  double required_positive_number(std::string_view key) const {
    if (!has(key)) fail(key, "missing required field (expected a positive number)");
    return optional_positive_number(key, 0.0);
  }

  bool optional_bool(std::string_view key, bool fallback) const {
    const json::value* v = find(key);
    if (!v) return fallback;
    if (!v->is_bool()) fail(key, "expected true or false, found " + found(*v));
    return v->get_bool();
  }

  std::string optional_string(std::string_view key, std::string fallback) const {
    const json::value* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "expected a string, found " + found(*v));
    return std::string(v->get_string());
  }

  // An id, a list of ids, or null (bos_token_id / eos_token_id).
  std::vector<std::int32_t> token_ids(std::string_view key, std::int64_t vocab) const {
    std::vector<std::int32_t> ids;
    const json::value* v = find(key);
    if (!v) return ids;
    auto one = [&](const json::value& e) {
      const std::int64_t id = integer(key, e);
      if (id < 0 || id >= vocab)
        fail(key, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                      std::to_string(vocab) + ")");
      ids.push_back(std::int32_t(id));
    };
    if (v->is_array()) {
      for (const auto& e : v->get_array()) one(e);
    } else {
      one(*v);
    }
    return ids;
  }

 private:
  const json::object& obj_;
  const std::filesystem::path& file_;
  std::string prefix_;
};

// One rope description: the legacy `rope_scaling` object or the newer
// `rope_parameters` one (which may also carry rope_theta).
void parse_rope_object(const json::object& obj, const std::filesystem::path& file,
                       const std::string& name, rope_config& rope) {
  field_reader r(obj, file, name + ".");
  rope.theta = r.optional_positive_number("rope_theta", rope.theta);
  // HF accepts the key as "rope_type" and, in older configs, "type".
  const char* type_key = r.has("rope_type") ? "rope_type" : "type";
  const std::string type = r.optional_string(type_key, "default");
  if (type == "default") {
    rope.type = "default";
    return;
  }
  if (type == "linear") {
    rope.type = "linear";
    rope.factor = r.required_positive_number("factor");
    return;
  }
  if (type == "llama3") {
    rope.type = "llama3";
    rope.factor = r.required_positive_number("factor");
    rope.low_freq_factor = r.required_positive_number("low_freq_factor");
    rope.high_freq_factor = r.required_positive_number("high_freq_factor");
    const json::value* orig = r.find("original_max_position_embeddings");
    if (!orig) r.fail("original_max_position_embeddings", "missing required field (expected a positive integer)");
    rope.original_max_position_embeddings = r.positive("original_max_position_embeddings", *orig);
    // The smooth band divides by (high - low); HF's validation rejects the same.
    if (rope.high_freq_factor <= rope.low_freq_factor)
      r.fail("high_freq_factor", "expected high_freq_factor > low_freq_factor, found " +
                                     std::to_string(rope.high_freq_factor) + " <= " +
                                     std::to_string(rope.low_freq_factor));
    return;
  }
  r.fail(type_key, "unsupported rope type \"" + type + "\" (supported: default, linear, llama3)");
}

const json::object& as_object(const json::value& v, const std::filesystem::path& file, const std::string& field) {
  if (!v.is_object()) throw model_error(file, field, "expected a JSON object, found " + field_reader::found(v));
  return v.get_object();
}

}  // namespace

model_config parse_model_config(const std::string& json_text, const std::filesystem::path& origin) {
  json::error_code ec;
  const json::value root = json::parse(json_text, ec);
  if (ec) throw model_error(origin, "", "invalid JSON: " + ec.message());
  const json::object& obj = as_object(root, origin, "(top level)");
  const field_reader r(obj, origin);

  model_config c;

  // Architecture: model_type, or the architectures list when it is absent.
  c.model_type = r.optional_string("model_type", "");
  if (!c.model_type.empty() && c.model_type != "llama" && c.model_type != "mistral")
    r.fail("model_type", "unsupported model type \"" + c.model_type + "\" (supported: llama, mistral)");
  if (const json::value* arch = r.find("architectures")) {
    if (!arch->is_array() || arch->get_array().empty() || !arch->get_array()[0].is_string())
      r.fail("architectures", "expected a list of class names, found " + field_reader::found(*arch));
    const std::string a(arch->get_array()[0].get_string());
    std::string implied;
    if (a == "LlamaForCausalLM") implied = "llama";
    else if (a == "MistralForCausalLM") implied = "mistral";
    else r.fail("architectures", "unsupported architecture \"" + a + "\" (supported: LlamaForCausalLM, MistralForCausalLM)");
    if (c.model_type.empty()) c.model_type = implied;
    else if (c.model_type != implied)
      r.fail("architectures", "\"" + a + "\" does not match model_type \"" + c.model_type + "\"");
  }
  if (c.model_type.empty())
    r.fail("model_type", "missing, and no architectures either (expected \"llama\" or \"mistral\")");

  c.vocab_size = r.required_positive("vocab_size");
  c.hidden_size = r.required_positive("hidden_size");
  c.intermediate_size = r.required_positive("intermediate_size");
  c.num_hidden_layers = r.required_positive("num_hidden_layers");
  c.num_attention_heads = r.required_positive("num_attention_heads");
  c.num_key_value_heads = r.optional_positive("num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", "num_attention_heads " + std::to_string(c.num_attention_heads) +
                                      " is not a multiple of num_key_value_heads " +
                                      std::to_string(c.num_key_value_heads));
  if (r.has("head_dim")) {
    c.head_dim = r.optional_positive("head_dim", 0);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("hidden_size", "hidden_size " + std::to_string(c.hidden_size) +
                                " is not divisible by num_attention_heads " +
                                std::to_string(c.num_attention_heads) + " and head_dim is not given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  // RoPE rotates pairs of channels.
  if (c.head_dim % 2 != 0) r.fail("head_dim", "expected an even head dimension, found " + std::to_string(c.head_dim));

  // Defaults are those of transformers' LlamaConfig / MistralConfig.
  const bool mistral = c.model_type == "mistral";
  c.max_position_embeddings = r.optional_positive("max_position_embeddings", mistral ? 4096 * 32 : 2048);
  c.rms_norm_eps = r.optional_positive_number("rms_norm_eps", 1e-6);
  if (mistral) c.sliding_window = r.optional_positive("sliding_window", 0);
  // Attention here is full; it equals sliding-window attention for sequences
  // up to the window, so the usable context is capped at the window (Mistral
  // 7B v0.1: 4096) rather than silently diverging from the model beyond it.
  if (c.sliding_window > 0) c.max_position_embeddings = std::min(c.max_position_embeddings, c.sliding_window);

  const std::string act = r.optional_string("hidden_act", "silu");
  if (act != "silu")
    r.fail("hidden_act", "unsupported activation \"" + act + "\" (only silu, the SwiGLU MLP, is implemented)");
  if (r.optional_bool("attention_bias", false))
    r.fail("attention_bias", "attention_bias: true is unsupported (q/k/v/o projections without bias only)");
  if (r.optional_bool("mlp_bias", false))
    r.fail("mlp_bias", "mlp_bias: true is unsupported (gate/up/down projections without bias only)");

  c.rope.theta = r.optional_positive_number("rope_theta", 10000.0);
  if (const json::value* params = r.find("rope_parameters")) {
    parse_rope_object(as_object(*params, origin, "rope_parameters"), origin, "rope_parameters", c.rope);
  } else if (const json::value* scaling = r.find("rope_scaling")) {
    parse_rope_object(as_object(*scaling, origin, "rope_scaling"), origin, "rope_scaling", c.rope);
  }

  c.tie_word_embeddings = r.optional_bool("tie_word_embeddings", false);
  c.bos_token_ids = r.token_ids("bos_token_id", c.vocab_size);
  c.eos_token_ids = r.token_ids("eos_token_id", c.vocab_size);
  // transformers 5 writes "dtype", earlier versions "torch_dtype".
  c.torch_dtype = r.optional_string("dtype", r.optional_string("torch_dtype", ""));
  return c;
}

model_config load_model_config(const std::filesystem::path& config_json) {
  std::ifstream in(config_json, std::ios::binary);
  if (!in) throw model_error(config_json, "", "cannot open config file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw model_error(config_json, "", "read error");
  return parse_model_config(text.str(), config_json);
}

std::vector<float> rope_inv_freq(const model_config& c) {
  // Mirrors transformers' ROPE_INIT_FUNCTIONS step by step in f32, as torch
  // computes them, so that the frequencies match the reference bit for bit
  // or within an ulp (powf may round differently from torch's pow).
  const std::int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  const float base = float(c.rope.theta);
  const float dim = float(c.head_dim);
  // Default: inv_freq[i] = 1 / theta^(2i / d)  (RoFormer, eq. 15).
  for (std::int64_t i = 0; i < half; ++i)
    inv[std::size_t(i)] = 1.0f / std::pow(base, float(2 * i) / dim);

  if (c.rope.type == "linear") {
    // Position interpolation: positions / factor, i.e. frequencies / factor.
    for (auto& f : inv) f = f / float(c.rope.factor);
  } else if (c.rope.type == "llama3") {
    // _compute_llama3_parameters: wavelengths shorter than
    // original_max / high_freq_factor keep their frequency, longer than
    // original_max / low_freq_factor are divided by factor, and the band in
    // between blends the two with smooth = (orig / wavelen - low) / (high - low).
    const float factor = float(c.rope.factor);
    const float low = float(c.rope.low_freq_factor);
    const float high = float(c.rope.high_freq_factor);
    const float old_context = float(c.rope.original_max_position_embeddings);
    // torch compares the f32 wavelengths with these scalars cast to f32.
    const float low_freq_wavelen = float(double(c.rope.original_max_position_embeddings) / c.rope.low_freq_factor);
    const float high_freq_wavelen = float(double(c.rope.original_max_position_embeddings) / c.rope.high_freq_factor);
    const float two_pi = float(2.0 * std::numbers::pi);
    for (auto& f : inv) {
      const float wavelen = two_pi / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_context / wavelen - low) / (high - low);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

}  // namespace specpipe
