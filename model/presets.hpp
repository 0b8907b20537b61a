#pragma once
// Model shapes by name, for benchmarks that need a real architecture but not
// its weights (weights are generated on the device).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"

namespace specpipe {

// "llama3-8b", "llama2-7b", "mistral-7b", "tiny"; nullopt for other names.
std::optional<model_config> preset_config(std::string_view name);
std::vector<std::string> preset_names();

}  // namespace specpipe
