// cuda_model: weights uploaded to (or generated on) the GPU once.
#include "model/cuda_forward.hpp"

#include <stdexcept>
#include <string>

#ifdef SPECPIPE_HAVE_CUDA
#include <algorithm>
#include <span>

#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/int4_quantize.hpp"
#include "kernels/cuda/int4_tiled.hpp"
#include "kernels/int4_linear.hpp"
#include "kernels/int4_tiled.hpp"
#include "model/cuda_model_impl.hpp"
#endif

namespace specpipe {

std::size_t cuda_model::weight_bytes(const model_config& c) {
  const std::size_t h = std::size_t(c.hidden_size);
  const std::size_t per_layer =
      2 * (std::size_t(c.q_dim() + 2 * c.kv_dim()) * h + h * std::size_t(c.q_dim()) +
           3 * std::size_t(c.intermediate_size) * h) +
      2 * 4 * h;
  const std::size_t vocab = std::size_t(c.vocab_size) * h * 2;
  return per_layer * std::size_t(c.num_hidden_layers) + vocab * (c.tie_word_embeddings ? 1 : 2) + 4 * h;
}

#ifndef SPECPIPE_HAVE_CUDA

struct cuda_model::impl {
  model_config config;
};

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("the CUDA backend is not part of this build (configure with -DSPECPIPE_CUDA=ON)");
}
}  // namespace

cuda_model::cuda_model() = default;
cuda_model::cuda_model(const model_config&, const model_weights&, int) { no_cuda(); }
void cuda_model::make_draft(std::int64_t, kernels::cuda::int4_layout, bool) { no_cuda(); }
bool cuda_model::has_draft() const { return false; }
bool cuda_model::draft_lm_head() const { return false; }
kernels::cuda::int4_layout cuda_model::draft_layout() const { return kernels::cuda::int4_layout::rows; }
std::size_t cuda_model::draft_bytes() const { return 0; }
cuda_model cuda_model::random(const model_config&, std::uint64_t, int, float) { no_cuda(); }
cuda_model::~cuda_model() = default;
cuda_model::cuda_model(cuda_model&&) noexcept = default;
cuda_model& cuda_model::operator=(cuda_model&&) noexcept = default;
const model_config& cuda_model::config() const { return impl_->config; }
int cuda_model::device() const { return -1; }

#else

namespace kc = kernels::cuda;

namespace {

int dtype_code(dtype t) {
  switch (t) {
    case dtype::f32: return 0;
    case dtype::f16: return 1;
    case dtype::bf16: return 2;
    default: return -1;
  }
}

void check_view(const tensor_view& v, const char* name, std::int64_t rows, std::int64_t cols) {
  if (v.empty()) throw std::invalid_argument(std::string("cuda_model: tensor ") + name + " is missing");
  if (!v.contiguous() || dtype_code(v.type) < 0)
    throw std::invalid_argument(std::string("cuda_model: tensor ") + name + " is " + v.describe() +
                                "; expected a contiguous f32, f16 or bf16 tensor");
  if (v.numel() != rows * cols)
    throw std::invalid_argument(std::string("cuda_model: tensor ") + name + " is " + v.describe() +
                                ", expected " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " elements");
}

// Host -> device with conversion, through a fixed device staging buffer.
class uploader {
 public:
  explicit uploader(allocator& a) : staging_(a, bytes) {}

  void to_bf16(const tensor_view& src, std::uint16_t* dst) { run(src, dst, true); }
  void to_f32(const tensor_view& src, float* dst) { run(src, dst, false); }
  void finish() { stream_.synchronize(); }

 private:
  static constexpr std::size_t bytes = std::size_t(64) << 20;

  void run(const tensor_view& src, void* dst, bool bf16) {
    const std::size_t esz = dtype_size(src.type);
    const std::int64_t per = std::int64_t(bytes / esz);
    const auto* base = static_cast<const unsigned char*>(src.data);
    for (std::int64_t off = 0; off < src.numel(); off += per) {
      const std::int64_t n = std::min(per, src.numel() - off);
      // Same stream: the previous chunk's conversion has read the staging
      // buffer before this copy overwrites it.
      kc::copy_to_device(staging_.data(), base + std::size_t(off) * esz, std::size_t(n) * esz, stream_.get());
      if (bf16)
        kc::convert_to_bf16(staging_.data(), dtype_code(src.type), static_cast<std::uint16_t*>(dst) + off, n,
                            stream_.get());
      else
        kc::convert_to_f32(staging_.data(), dtype_code(src.type), static_cast<float*>(dst) + off, n,
                           stream_.get());
    }
  }

  buffer staging_;
  kc::stream stream_;
};

void allocate(cuda_model::impl& m) {
  const auto& c = m.config;
  if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.vocab_size <= 0 || c.head_dim <= 0 ||
      c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    throw std::invalid_argument("cuda_model: invalid model shape (hidden " + std::to_string(c.hidden_size) +
                                ", layers " + std::to_string(c.num_hidden_layers) + ", heads " +
                                std::to_string(c.num_attention_heads) + "/" +
                                std::to_string(c.num_key_value_heads) + ")");
  kc::set_device(m.device);
  m.alloc = make_device_allocator(m.device);
  allocator& a = *m.alloc;
  const std::size_t h = std::size_t(c.hidden_size);
  m.embed = buffer(a, std::size_t(c.vocab_size) * h * 2);
  if (!c.tie_word_embeddings) m.lm_head = buffer(a, std::size_t(c.vocab_size) * h * 2);
  m.final_norm = buffer(a, h * 4);
  const auto inv = rope_inv_freq(c);
  m.inv_freq = buffer(a, inv.size() * 4);
  kc::copy_to_device(m.inv_freq.data(), inv.data(), inv.size() * 4, nullptr);
  kc::device_synchronize();
  m.layers.resize(std::size_t(c.num_hidden_layers));
  for (auto& l : m.layers) {
    l.attn_norm = buffer(a, h * 4);
    l.mlp_norm = buffer(a, h * 4);
    l.wqkv = buffer(a, std::size_t(c.q_dim() + 2 * c.kv_dim()) * h * 2);
    l.wo = buffer(a, h * std::size_t(c.q_dim()) * 2);
    l.wgu = buffer(a, 2 * std::size_t(c.intermediate_size) * h * 2);
    l.wdown = buffer(a, h * std::size_t(c.intermediate_size) * 2);
  }
}

}  // namespace

cuda_model::cuda_model() = default;

cuda_model::cuda_model(const model_config& config, const model_weights& w, int device)
    : impl_(std::make_unique<impl>()) {
  impl_->config = config;
  impl_->device = device;
  allocate(*impl_);
  const auto& c = config;
  const std::int64_t h = c.hidden_size;
  if (std::int64_t(w.layers.size()) != c.num_hidden_layers)
    throw std::invalid_argument("cuda_model: " + std::to_string(w.layers.size()) + " layers of weights, config has " +
                                std::to_string(c.num_hidden_layers));
  uploader up(*impl_->alloc);
  check_view(w.embed, "model.embed_tokens.weight", c.vocab_size, h);
  up.to_bf16(w.embed, impl_->embed.as<std::uint16_t>());
  if (!c.tie_word_embeddings) {
    check_view(w.lm_head, "lm_head.weight", c.vocab_size, h);
    up.to_bf16(w.lm_head, impl_->lm_head.as<std::uint16_t>());
  }
  check_view(w.final_norm, "model.norm.weight", 1, h);
  up.to_f32(w.final_norm, impl_->final_norm.as<float>());
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const auto& s = w.layers[i];
    auto& d = impl_->layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    check_view(s.attn_norm, (p + "input_layernorm.weight").c_str(), 1, h);
    check_view(s.mlp_norm, (p + "post_attention_layernorm.weight").c_str(), 1, h);
    check_view(s.wq, (p + "self_attn.q_proj.weight").c_str(), c.q_dim(), h);
    check_view(s.wk, (p + "self_attn.k_proj.weight").c_str(), c.kv_dim(), h);
    check_view(s.wv, (p + "self_attn.v_proj.weight").c_str(), c.kv_dim(), h);
    check_view(s.wo, (p + "self_attn.o_proj.weight").c_str(), h, c.q_dim());
    check_view(s.w_gate, (p + "mlp.gate_proj.weight").c_str(), c.intermediate_size, h);
    check_view(s.w_up, (p + "mlp.up_proj.weight").c_str(), c.intermediate_size, h);
    check_view(s.w_down, (p + "mlp.down_proj.weight").c_str(), h, c.intermediate_size);
    up.to_f32(s.attn_norm, d.attn_norm.as<float>());
    up.to_f32(s.mlp_norm, d.mlp_norm.as<float>());
    auto* qkv = d.wqkv.as<std::uint16_t>();
    up.to_bf16(s.wq, qkv);
    up.to_bf16(s.wk, qkv + c.q_dim() * h);
    up.to_bf16(s.wv, qkv + (c.q_dim() + c.kv_dim()) * h);
    up.to_bf16(s.wo, d.wo.as<std::uint16_t>());
    auto* gu = d.wgu.as<std::uint16_t>();
    up.to_bf16(s.w_gate, gu);
    up.to_bf16(s.w_up, gu + c.intermediate_size * h);
    up.to_bf16(s.w_down, d.wdown.as<std::uint16_t>());
  }
  up.finish();
}

cuda_model cuda_model::random(const model_config& config, std::uint64_t seed, int device, float std_dev) {
  cuda_model m;
  m.impl_ = std::make_unique<impl>();
  m.impl_->config = config;
  m.impl_->device = device;
  allocate(*m.impl_);
  kc::stream st;
  // Uniform(-a, a) has standard deviation a / sqrt(3).
  const float a = std_dev * 1.7320508f;
  std::uint64_t tensor = 0;
  auto mat = [&](buffer& b) {
    kc::fill_uniform_bf16(b.as<std::uint16_t>(), std::int64_t(b.size() / 2), -a, a,
                          seed * 0x100000001b3ull + ++tensor, st.get());
  };
  auto norm = [&](buffer& b) {
    kc::fill_uniform_f32(b.as<float>(), std::int64_t(b.size() / 4), 0.9f, 1.1f,
                         seed * 0x100000001b3ull + ++tensor, st.get());
  };
  mat(m.impl_->embed);
  if (m.impl_->lm_head.data()) mat(m.impl_->lm_head);
  norm(m.impl_->final_norm);
  for (auto& l : m.impl_->layers) {
    norm(l.attn_norm);
    norm(l.mlp_norm);
    mat(l.wqkv);
    mat(l.wo);
    mat(l.wgu);
    mat(l.wdown);
  }
  st.synchronize();
  return m;
}

void cuda_model::make_draft(std::int64_t group, kc::int4_layout layout, bool lm_head) {
  auto& m = *impl_;
  if (m.draft_group != 0)
    throw std::logic_error("cuda_model::make_draft: the draft exists (group " + std::to_string(m.draft_group) + ")");
  if (group <= 0 || group % 32 != 0)
    throw std::invalid_argument("cuda_model::make_draft: group " + std::to_string(group) +
                                " is not a positive multiple of 32 (the int4 GEMV's lanes take 32 codes of one group)");
  const model_config& c = m.config;
  for (const std::int64_t k : {c.hidden_size, c.q_dim(), c.intermediate_size})
    if (k % 32 != 0)
      throw std::invalid_argument("cuda_model::make_draft: a projection's input size " + std::to_string(k) +
                                  " is not a multiple of 32");
  kc::set_device(m.device);
  kc::stream st;
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
  // The projections' shapes, then lm_head's (quantized only when asked).
  const std::int64_t shapes[][2] = {
      {c.q_dim() + 2 * c.kv_dim(), h}, {h, c.q_dim()}, {2 * inter, h}, {h, inter}, {c.vocab_size, h}};
  const std::span<const std::int64_t[2]> quantized(shapes, lm_head ? 5 : 4);
  // Tiles: each projection is quantized into the row layout in scratch
  // buffers sized for the largest one, then repacked on the device into its
  // own buffers (the rows never reach host memory; the scratch is freed at
  // the end, after the stream has drained).
  buffer rows_codes, rows_scale, rows_zero;
  if (layout == kc::int4_layout::tiles) {
    std::int64_t codes = 0, scales = 0;
    for (const auto& [out, in] : quantized) {
      codes = std::max(codes, out * kernels::cpu::int4_code_stride(in));
      scales = std::max(scales, out * ((in + group - 1) / group));
    }
    rows_codes = buffer(*m.alloc, std::size_t(codes));
    rows_scale = buffer(*m.alloc, std::size_t(scales) * 2);
    rows_zero = buffer(*m.alloc, std::size_t(scales) * 2);
  }
  auto quantize = [&](const std::uint16_t* w, std::int64_t out, std::int64_t in, cuda_int4& q) {
    q.out = out;
    q.in = in;
    q.group = group;
    q.layout = layout;
    const std::int64_t groups = (in + group - 1) / group;
    const bool tiles = layout == kc::int4_layout::tiles;
    kc::int4_quantize_args a;
    a.w = w;
    a.ldw = in;
    a.code_stride = kernels::cpu::int4_code_stride(in);
    a.out = out;
    a.in = in;
    a.group = group;
    if (tiles) {
      a.codes = rows_codes.as<std::uint8_t>();
      a.scale = rows_scale.as<std::uint16_t>();
      a.zero = rows_zero.as<std::uint16_t>();
    } else {
      q.code_stride = a.code_stride;
      q.codes = buffer(*m.alloc, std::size_t(out * q.code_stride));
      q.scale = buffer(*m.alloc, std::size_t(out * groups) * 2);
      q.zero = buffer(*m.alloc, std::size_t(out * groups) * 2);
      a.codes = q.codes.as<std::uint8_t>();
      a.scale = q.scale.as<std::uint16_t>();
      a.zero = q.zero.as<std::uint16_t>();
    }
    kc::int4_quantize(a, st.get());
    if (!tiles) return;
    q.codes = buffer(*m.alloc, std::size_t(kernels::cpu::int4_tiled_code_bytes(out, in)));
    q.scale_zero = buffer(*m.alloc, std::size_t(kernels::cpu::int4_tiled_scale_zero_size(out, in, group)) * 2);
    kc::int4_tile_args t;
    t.codes = a.codes;
    t.code_stride = a.code_stride;
    t.scale = a.scale;
    t.zero = a.zero;
    t.out = out;
    t.in = in;
    t.group = group;
    t.tiled_codes = q.codes.as<std::uint8_t>();
    t.tiled_scale_zero = q.scale_zero.as<std::uint16_t>();
    kc::int4_tile(t, st.get());  // stream order: the next projection's quantize reuses the scratch after this
  };
  // The qkv weight's q and k rows in RoPE pair order in the tiles
  // (kernels/int4_tiled.hpp, int4_rope_pair_row), so that the GEMV can apply
  // RoPE as its epilogue (cuda_forward_options::fuse_rope); it writes y in
  // natural order either way. 4-bit rows are quantized one by one, so
  // quantizing the rows moved is moving the quantized rows. The move runs
  // on the device into a scratch copy (stream order: the next layer's move
  // waits for this layer's quantize).
  const std::int64_t hd = c.head_dim, qkv_rows = c.q_dim() + 2 * c.kv_dim();
  const std::int64_t pair_rows = c.q_dim() + c.kv_dim();
  const bool pairs = layout == kc::int4_layout::tiles && hd > 0 && hd % 16 == 0;
  buffer paired;
  if (pairs) paired = buffer(*m.alloc, std::size_t(qkv_rows * h) * 2);
  auto pair_order = [&](const std::uint16_t* w) {
    const std::size_t row = std::size_t(h) * 2, piece = 8 * row;  // bytes
    auto* dst = paired.as<std::uint16_t>();
    for (std::int64_t head = 0; head < pair_rows / hd; ++head)
      for (int half = 0; half < 2; ++half)  // stored rows 16 j + 8 half + r <- natural hd / 2 half + 8 j + r
        kc::copy_rows_on_device(dst + (head * hd + 8 * half) * h, 2 * piece, w + (head * hd + half * hd / 2) * h,
                                piece, piece, std::size_t(hd / 16), st.get());
    kc::copy_on_device(dst + pair_rows * h, w + pair_rows * h, std::size_t(qkv_rows - pair_rows) * row, st.get());
    return static_cast<const std::uint16_t*>(dst);
  };
  for (auto& l : m.layers) {
    quantize(pairs ? pair_order(l.wqkv.as<std::uint16_t>()) : l.wqkv.as<std::uint16_t>(), qkv_rows, h, l.wqkv_q);
    if (pairs) {
      l.wqkv_q.pair_rows = pair_rows;
      l.wqkv_q.pair_head_dim = int(hd);
    }
    quantize(l.wo.as<std::uint16_t>(), h, c.q_dim(), l.wo_q);
    quantize(l.wgu.as<std::uint16_t>(), 2 * inter, h, l.wgu_q);
    quantize(l.wdown.as<std::uint16_t>(), h, inter, l.wdown_q);
  }
  if (lm_head) quantize(m.lm_head_ptr(), c.vocab_size, h, m.lm_head_q);  // the embedding's rows when tied
  st.synchronize();
  m.draft_group = group;
  m.draft_layout = layout;
}

bool cuda_model::has_draft() const { return impl_->draft_group != 0; }
bool cuda_model::draft_lm_head() const { return impl_->lm_head_q.out != 0; }
kc::int4_layout cuda_model::draft_layout() const { return impl_->draft_layout; }

std::size_t cuda_model::draft_bytes() const {
  std::size_t n = 0;
  for (const auto& l : impl_->layers) n += l.wqkv_q.bytes() + l.wo_q.bytes() + l.wgu_q.bytes() + l.wdown_q.bytes();
  return n + impl_->lm_head_q.bytes();
}

cuda_model::~cuda_model() = default;
cuda_model::cuda_model(cuda_model&&) noexcept = default;
cuda_model& cuda_model::operator=(cuda_model&&) noexcept = default;
const model_config& cuda_model::config() const { return impl_->config; }
int cuda_model::device() const { return impl_->device; }

#endif

}  // namespace specpipe
