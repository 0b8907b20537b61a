#pragma once
// Identifiers shared by the pipeline's actors and pure cores.
#include <cstdint>

namespace specpipe {

// A sequence is one generation request; the scheduler uses the request id.
using seq_id = std::uint64_t;

// Links a top-k request to its transfer and to the step that consumes it, in
// the trace (Chrome flow event ids) and in the messages.
using flow_id = std::uint64_t;

}  // namespace specpipe
