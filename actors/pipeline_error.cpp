#include "actors/pipeline_error.hpp"

#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace specpipe {

const char* to_string(pipeline_errc c) {
  switch (c) {
    case pipeline_errc::none: return "none";
    case pipeline_errc::invalid_request: return "invalid_request";
    case pipeline_errc::store_exhausted: return "store_exhausted";
    case pipeline_errc::worker_failed: return "worker_failed";
    case pipeline_errc::transfer_failed: return "transfer_failed";
    case pipeline_errc::unknown_sequence: return "unknown_sequence";
    case pipeline_errc::cancelled: return "cancelled";
    case pipeline_errc::no_worker: return "no_worker";
  }
  return "unknown";
}

caf::error make_pipeline_error(pipeline_errc code, std::string context) {
  return caf::error{code, std::move(context)};
}

std::string describe(const caf::error& e) {
  if (!e) return "no error";
  std::string ctx;
  if (e.context().match_elements<std::string>()) ctx = e.context().get_as<std::string>(0);
  if (e.category() == caf::atom("specpipe")) {
    std::string s = to_string(static_cast<pipeline_errc>(e.code()));
    return ctx.empty() ? s : s + ": " + ctx;
  }
  if (e.category() == caf::atom("system"))
    return std::string("actor system: ") + to_string(static_cast<caf::sec>(e.code())) + (ctx.empty() ? "" : ": " + ctx);
  return caf::to_string(e);
}

}  // namespace specpipe
