#include "actors/model_sampling.hpp"

#include <memory>

#include "model/sampler.hpp"

namespace specpipe {

picker_factory model_picker_factory() {
  return [](const sampling_params& p) -> token_picker {
    p.validate();
    auto s = std::make_shared<sampler>(p);
    return [s](std::span<const float> logits) { return s->sample(logits); };
  };
}

detokenizer model_detokenizer(const tokenizer& tok) {
  return [&tok](std::span<const std::int32_t> ids) { return tok.decode(ids); };
}

}  // namespace specpipe
