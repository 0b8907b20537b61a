#pragma once
// The pipeline's error codes, carried in caf::error with a context string
// that names the request, sequence, worker or budget involved.
#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace specpipe {

enum class pipeline_errc : std::uint8_t {
  none = 0,
  invalid_request,   // bad prompt, token ids, sampling, duplicate id
  store_exhausted,   // the host KV store's budget cannot hold the rows
  worker_failed,     // a forward pass threw, or the worker is gone
  transfer_failed,   // a gather could not be executed
  unknown_sequence,  // a message named a sequence nobody holds
  cancelled,         // the client cancelled the request
  no_worker,         // every worker is gone
};

const char* to_string(pipeline_errc c);

// An error with its context; what() of the pipeline is describe(e).
caf::error make_pipeline_error(pipeline_errc code, std::string context);

// "store_exhausted: request 3: ..." for pipeline errors, CAF's rendering
// for the others (timeouts, dead actors).
std::string describe(const caf::error& e);

}  // namespace specpipe

CAF_ERROR_CODE_ENUM(specpipe::pipeline_errc, "specpipe")
