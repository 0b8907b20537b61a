#include "model/config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/model_error.hpp"

namespace specpipe {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::filesystem::path hf_dir = std::filesystem::path(SPECPIPE_TEST_DATA_DIR) / "hf";
const std::filesystem::path origin = "inline/config.json";

// Llama-3.1-8B's config.json, trimmed to the fields the loader reads.
const char* const llama31_8b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "attention_bias": false, "mlp_bias": false, "hidden_act": "silu",
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The base config with one (possibly nested, dotted) key set to `value_json`,
// or erased when value_json is null.
std::string with(const char* key, const char* value_json) {
  json::value root = json::parse(llama31_8b);
  json::object* obj = &root.as_object();
  std::string k = key;
  for (auto dot = k.find('.'); dot != std::string::npos; dot = k.find('.')) {
    obj = &(*obj)[k.substr(0, dot)].as_object();
    k = k.substr(dot + 1);
  }
  if (value_json) (*obj)[k] = json::parse(value_json);
  else obj->erase(k);
  return json::serialize(root);
}

TEST(config, parses_llama31_8b) {
  const model_config c = parse_model_config(llama31_8b, origin);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.group_size(), 4);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_THAT(c.bos_token_ids, ElementsAre(128000));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(config, loads_llama3_fixture) {
  const model_config c = load_model_config(hf_dir / "llama3" / "config.json");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 384);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2, 3));
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(config, loads_mistral_fixture_with_explicit_head_dim) {
  const model_config c = load_model_config(hf_dir / "mistral" / "config.json");
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.hidden_size, 48);
  EXPECT_EQ(c.head_dim, 16);  // not 48 / 4
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.kv_dim(), 16);
  EXPECT_EQ(c.sliding_window, 0);  // null
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
}

TEST(config, loads_llama2_fixture) {
  const model_config c = load_model_config(hf_dir / "llama2_sharded" / "config.json");
  EXPECT_EQ(c.num_key_value_heads, c.num_attention_heads);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(config, accepts_rope_parameters_form) {
  const std::string text = R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})";
  const model_config c = parse_model_config(text, origin);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);

  const model_config d = parse_model_config(
      R"({"model_type": "mistral", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 1, "num_attention_heads": 4, "rope_theta": 123.0,
          "rope_parameters": {"rope_type": "default"}})",
      origin);
  EXPECT_EQ(d.rope.type, "default");
  EXPECT_DOUBLE_EQ(d.rope.theta, 123.0);  // top-level theta when the object has none
}

// What transformers 5 writes for the llama3 fixture's config: rope_theta moves
// into rope_parameters. It must give the fixture's frequencies exactly.
TEST(config, transformers5_config_matches_the_transformers4_fixture) {
  const model_config v5 = parse_model_config(R"({
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
    "intermediate_size": 160, "max_position_embeddings": 2048, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-06,
    "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
      "original_max_position_embeddings": 64, "rope_theta": 500000.0, "rope_type": "llama3"},
    "tie_word_embeddings": true, "transformers_version": "5.24.0", "use_cache": true,
    "vocab_size": 384})",
                                             origin);
  const model_config v4 = load_model_config(hf_dir / "llama3" / "config.json");
  EXPECT_EQ(v5.rope.type, "llama3");
  EXPECT_EQ(v5.rope.original_max_position_embeddings, 64);
  EXPECT_EQ(rope_inv_freq(v5), rope_inv_freq(v4));
  EXPECT_EQ(v5.q_dim(), v4.q_dim());
  EXPECT_EQ(v5.kv_dim(), v4.kv_dim());
}

TEST(config, applies_defaults_for_null_and_absent_fields) {
  const model_config c = parse_model_config(
      R"({"architectures": ["MistralForCausalLM"], "vocab_size": 10, "hidden_size": 64,
          "intermediate_size": 128.0, "num_hidden_layers": 1, "num_attention_heads": 4,
          "num_key_value_heads": null, "head_dim": null, "rope_scaling": null,
          "eos_token_id": null, "dtype": "bfloat16", "sliding_window": 4096})",
      origin);
  EXPECT_EQ(c.model_type, "mistral");  // from architectures
  EXPECT_EQ(c.intermediate_size, 128);  // integral float accepted
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_TRUE(c.bos_token_ids.empty());
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.sliding_window, 4096);
  // Full attention equals the window's only up to the window: the usable
  // context is capped there (the absent max_position_embeddings is 131072).
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);  // transformers' default
}

TEST(config, accepts_legacy_type_key_and_default_scaling) {
  model_config c = parse_model_config(with("rope_scaling", R"({"type": "linear", "factor": 2.0})"), origin);
  EXPECT_EQ(c.rope.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
  c = parse_model_config(with("rope_scaling", R"({"rope_type": "default"})"), origin);
  EXPECT_EQ(c.rope.type, "default");
  c = parse_model_config(with("eos_token_id", "7"), origin);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(7));
}

struct bad_case {
  const char* name;
  const char* key;
  const char* value;  // JSON; nullptr erases the key
  const char* field;
  const char* what;
};

void PrintTo(const bad_case& b, std::ostream* os) { *os << b.name; }

class bad_config : public ::testing::TestWithParam<bad_case> {};

TEST_P(bad_config, names_file_field_and_expected_vs_found) {
  const bad_case& b = GetParam();
  const std::string text = with(b.key, b.value);
  try {
    parse_model_config(text, origin);
    FAIL() << "accepted: " << text;
  } catch (const model_error& e) {
    EXPECT_EQ(e.file(), origin);
    EXPECT_EQ(e.field(), b.field) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(b.what));
    EXPECT_THAT(e.what(), HasSubstr(origin.string()));
  }
}

const bad_case bad_cases[] = {
    {"missing_vocab", "vocab_size", nullptr, "vocab_size", "missing required field (expected a positive integer)"},
    {"zero_hidden", "hidden_size", "0", "hidden_size", "expected a positive integer, found 0"},
    {"negative_layers", "num_hidden_layers", "-2", "num_hidden_layers", "expected a positive integer, found -2"},
    {"string_size", "intermediate_size", "\"14336\"", "intermediate_size", "expected an integer, found \"14336\""},
    {"fractional_heads", "num_attention_heads", "32.5", "num_attention_heads", "expected an integer, found 32.5"},
    {"missing_heads", "num_attention_heads", nullptr, "num_attention_heads", "missing required field"},
    {"kv_not_divisor", "num_key_value_heads", "5", "num_key_value_heads",
     "num_attention_heads 32 is not a multiple of num_key_value_heads 5"},
    {"zero_kv", "num_key_value_heads", "0", "num_key_value_heads", "expected a positive integer, found 0"},
    {"hidden_not_divisible", "hidden_size", "4100", "hidden_size",
     "hidden_size 4100 is not divisible by num_attention_heads 32 and head_dim is not given"},
    {"zero_head_dim", "head_dim", "0", "head_dim", "expected a positive integer, found 0"},
    {"odd_head_dim", "head_dim", "15", "head_dim", "expected an even head dimension, found 15"},
    {"bad_eps", "rms_norm_eps", "0", "rms_norm_eps", "expected a positive number, found 0"},
    {"string_eps", "rms_norm_eps", "\"1e-5\"", "rms_norm_eps", "expected a number, found \"1e-5\""},
    {"bad_theta", "rope_theta", "-1", "rope_theta", "expected a positive number, found -1"},
    {"yarn", "rope_scaling.rope_type", "\"yarn\"", "rope_scaling.rope_type",
     "unsupported rope type \"yarn\" (supported: default, linear, llama3)"},
    {"dynamic_legacy", "rope_scaling", R"({"type": "dynamic", "factor": 2.0})", "rope_scaling.type",
     "unsupported rope type \"dynamic\""},
    {"llama3_no_factor", "rope_scaling.factor", nullptr, "rope_scaling.factor", "missing required field"},
    {"llama3_no_orig", "rope_scaling.original_max_position_embeddings", nullptr,
     "rope_scaling.original_max_position_embeddings", "missing required field"},
    {"llama3_bad_band", "rope_scaling.high_freq_factor", "0.5", "rope_scaling.high_freq_factor",
     "expected high_freq_factor > low_freq_factor"},
    {"linear_no_factor", "rope_scaling", R"({"rope_type": "linear"})", "rope_scaling.factor",
     "missing required field (expected a positive number)"},
    {"linear_zero_factor", "rope_scaling", R"({"rope_type": "linear", "factor": 0})", "rope_scaling.factor",
     "expected a positive number, found 0"},
    {"scaling_not_object", "rope_scaling", "\"linear\"", "rope_scaling", "expected a JSON object, found \"linear\""},
    {"rope_parameters_su", "rope_parameters", R"({"rope_type": "longrope", "rope_theta": 1e4})",
     "rope_parameters.rope_type", "unsupported rope type \"longrope\""},
    {"attention_bias", "attention_bias", "true", "attention_bias", "attention_bias: true is unsupported"},
    {"mlp_bias", "mlp_bias", "true", "mlp_bias", "mlp_bias: true is unsupported"},
    {"bias_not_bool", "attention_bias", "1", "attention_bias", "expected true or false, found 1"},
    {"gelu", "hidden_act", "\"gelu\"", "hidden_act", "unsupported activation \"gelu\""},
    {"qwen", "model_type", "\"qwen2\"", "model_type", "unsupported model type \"qwen2\" (supported: llama, mistral)"},
    {"gpt2_arch", "architectures", R"(["GPT2LMHeadModel"])", "architectures",
     "unsupported architecture \"GPT2LMHeadModel\""},
    {"arch_mismatch", "architectures", R"(["MistralForCausalLM"])", "architectures",
     "\"MistralForCausalLM\" does not match model_type \"llama\""},
    {"eos_out_of_vocab", "eos_token_id", "[128001, 999999]", "eos_token_id",
     "token id 999999 is outside the vocabulary [0, 128256)"},
    {"bos_negative", "bos_token_id", "-1", "bos_token_id", "token id -1 is outside the vocabulary"},
    {"eos_string", "eos_token_id", "\"</s>\"", "eos_token_id", "expected an integer, found \"</s>\""},
    {"tie_string", "tie_word_embeddings", "\"yes\"", "tie_word_embeddings", "expected true or false, found \"yes\""},
    {"dtype_number", "torch_dtype", "16", "torch_dtype", "expected a string, found 16"},
    {"zero_positions", "max_position_embeddings", "0", "max_position_embeddings",
     "expected a positive integer, found 0"},
};

INSTANTIATE_TEST_SUITE_P(cases, bad_config, ::testing::ValuesIn(bad_cases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(config, rejects_missing_model_type_and_architectures) {
  std::string text = with("model_type", nullptr);
  json::value v = json::parse(text);
  v.as_object().erase("architectures");
  try {
    parse_model_config(json::serialize(v), origin);
    FAIL();
  } catch (const model_error& e) {
    EXPECT_EQ(e.field(), "model_type");
    EXPECT_THAT(e.what(), HasSubstr("expected \"llama\" or \"mistral\""));
  }
}

TEST(config, rejects_invalid_json_and_non_object) {
  try {
    parse_model_config("{\"vocab_size\": ", origin);
    FAIL();
  } catch (const model_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("inline/config.json: invalid JSON"));
  }
  try {
    parse_model_config("[1, 2]", origin);
    FAIL();
  } catch (const model_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected a JSON object, found [1,2]"));
  }
}

TEST(config, load_names_missing_file) {
  const auto missing = hf_dir / "no_such_model" / "config.json";
  try {
    load_model_config(missing);
    FAIL();
  } catch (const model_error& e) {
    EXPECT_EQ(e.file(), missing);
    EXPECT_THAT(e.what(), HasSubstr("cannot open"));
  }
}

// --- RoPE inverse frequencies -------------------------------------------------

// transformers' values (tools/make_hf_fixtures.py) for several configs,
// including Llama-3.1-8B's llama3 scaling.
TEST(rope_inv_freq, matches_transformers) {
  const json::value doc = json::parse(read_text(hf_dir / "rope_inv_freq.json"));
  const auto& cases = doc.at("cases").as_array();
  ASSERT_GE(cases.size(), 6u);
  for (const auto& cv : cases) {
    const auto& c = cv.as_object();
    const std::string name(c.at("name").as_string());
    SCOPED_TRACE(name);
    const model_config cfg = parse_model_config(json::serialize(c.at("config")), "rope_inv_freq.json#" + name);
    const std::vector<float> got = rope_inv_freq(cfg);
    const auto& want = c.at("inv_freq").as_array();
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(std::int64_t(got.size()), cfg.head_dim / 2);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double w = want[i].to_number<double>();
      // f32 arithmetic as in torch: equal up to a couple of ulps of powf.
      EXPECT_NEAR(got[i], w, 3e-7 * std::fabs(w)) << "i = " << i;
    }
  }
}

TEST(rope_inv_freq, scaling_changes_only_the_configured_bands) {
  model_config c = parse_model_config(llama31_8b, origin);
  const std::vector<float> scaled = rope_inv_freq(c);
  c.rope.type = "default";
  const std::vector<float> plain = rope_inv_freq(c);
  ASSERT_EQ(scaled.size(), 64u);
  int kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * M_PI / plain[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(scaled[i], plain[i] / 8.0f) << i;
      ++divided;
    } else {
      EXPECT_LT(scaled[i], plain[i]) << i;
      EXPECT_GT(scaled[i], plain[i] / 8.0f) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);

  c.rope.type = "linear";
  c.rope.factor = 4.0;
  const std::vector<float> linear = rope_inv_freq(c);
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(linear[i], plain[i] / 4.0f) << i;
  EXPECT_EQ(plain[0], 1.0f);
}

}  // namespace
}  // namespace specpipe
