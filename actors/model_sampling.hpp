#pragma once
// The scheduler's sampling and text hooks bound to the model room: tokens are
// picked by specpipe::sampler and text comes from the model's tokenizer, so
// the actor path prints what model/generator.cpp's direct loop prints.
#include "actors/scheduler.hpp"
#include "model/tokenizer.hpp"

namespace specpipe {

// Validates the parameters (std::invalid_argument naming the field) and
// returns a picker with its own seeded sampler.
picker_factory model_picker_factory();

// `tok` must outlive the pipeline.
detokenizer model_detokenizer(const tokenizer& tok);

}  // namespace specpipe
