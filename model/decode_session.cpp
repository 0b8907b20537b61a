#include "model/decode_session.hpp"

namespace specpipe {
namespace {

class cache_session final : public decode_session {
 public:
  cache_session(cpu_forward& fwd, std::unique_ptr<cache_policy> cache) : fwd_(fwd), cache_(std::move(cache)) {}
  std::int64_t length() const override { return cache_->length(0); }
  void prefill(std::span<const std::int32_t> tokens, std::span<float> logits) override {
    fwd_.forward(tokens, *cache_, logits);
  }
  void step(std::int32_t token, std::span<float> logits) override {
    fwd_.forward(std::span(&token, 1), *cache_, logits);
  }

 private:
  cpu_forward& fwd_;
  std::unique_ptr<cache_policy> cache_;
};

}  // namespace

std::unique_ptr<decode_session> make_cache_session(cpu_forward& fwd, std::unique_ptr<cache_policy> cache) {
  return std::make_unique<cache_session>(fwd, std::move(cache));
}

}  // namespace specpipe
