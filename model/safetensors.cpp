#include "model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "model/model_error.hpp"

namespace specpipe {
namespace {

namespace json = boost::json;

// A header larger than this is not a real checkpoint (a 405B model's header
// is a few MB); refusing it keeps a corrupt length from allocating gigabytes.
constexpr std::uint64_t max_header_bytes = 100ull * 1000 * 1000;

std::string short_json(const json::value& v) {
  // Boost.JSON prints 2.5 as 2.5E0; show numbers as they were written.
  if (v.is_double()) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v.get_double());
    return std::string(buf, r.ptr);
  }
  std::string s = json::serialize(v);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string errno_text() { return std::strerror(errno); }

// Safetensors dtype names (upper case, as the format defines them).
std::optional<dtype> safetensors_dtype(std::string_view name) {
  if (name == "F32") return dtype::f32;
  if (name == "F16") return dtype::f16;
  if (name == "BF16") return dtype::bf16;
  if (name == "I8") return dtype::i8;
  if (name == "U8") return dtype::u8;
  if (name == "I32") return dtype::i32;
  return std::nullopt;
}

bool known_unsupported_dtype(std::string_view name) {
  static const std::set<std::string_view> names = {
      "F64", "I64", "U64", "I16", "U16", "U32", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0",
      "F6_E2M3", "F6_E3M2", "F4", "C64", "I4", "U4"};
  return names.count(name) != 0;
}

std::int64_t non_negative_int(const json::value& v, const std::filesystem::path& file, const std::string& tensor,
                              const char* what) {
  if (v.is_int64() && v.get_int64() >= 0) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= std::uint64_t(INT64_MAX)) return std::int64_t(v.get_uint64());
  throw model_error(file, tensor, std::string(what) + ": expected a non-negative integer, found " + short_json(v));
}

// One tensor's header entry, validated against the data section's size.
// Returns the entry with `data` still relative (offset stored in `bytes` and
// the returned begin offset), so alignment can be decided before pointers exist.
struct parsed_entry {
  tensor_entry entry;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

parsed_entry parse_entry(const std::string& name, const json::value& v, const std::filesystem::path& file,
                         std::uint64_t data_bytes) {
  if (!v.is_object()) throw model_error(file, name, "expected a tensor description object, found " + short_json(v));
  const json::object& o = v.get_object();
  parsed_entry p;
  p.entry.name = name;
  p.entry.file = file;

  const json::value* dt = o.if_contains("dtype");
  if (!dt || !dt->is_string()) throw model_error(file, name, "dtype: missing or not a string");
  const std::string dname(dt->get_string());
  const auto type = safetensors_dtype(dname);
  if (!type) {
    if (known_unsupported_dtype(dname))
      throw model_error(file, name, "dtype " + dname + " is unsupported (supported: F32, F16, BF16, I8, U8, I32)");
    throw model_error(file, name, "unknown dtype \"" + dname + "\"");
  }
  p.entry.type = *type;

  const json::value* sh = o.if_contains("shape");
  if (!sh || !sh->is_array()) throw model_error(file, name, "shape: missing or not an array");
  if (sh->get_array().size() > std::size_t(tensor_view::max_rank))
    throw model_error(file, name, "shape " + short_json(*sh) + " has rank " + std::to_string(sh->get_array().size()) +
                                      ", more than the " + std::to_string(tensor_view::max_rank) + " supported");
  // numel * size in bytes, checked against overflow: a corrupt shape must not wrap.
  std::uint64_t bytes = dtype_size(*type);
  for (const auto& d : sh->get_array()) {
    const std::int64_t n = non_negative_int(d, file, name, "shape");
    p.entry.shape.push_back(n);
    if (n != 0 && bytes > UINT64_MAX / std::uint64_t(n))
      throw model_error(file, name, "shape " + short_json(*sh) + " overflows a 64-bit byte count");
    bytes *= std::uint64_t(n);
  }

  const json::value* off = o.if_contains("data_offsets");
  if (!off || !off->is_array() || off->get_array().size() != 2)
    throw model_error(file, name, "data_offsets: expected [begin, end], found " + (off ? short_json(*off) : "nothing"));
  p.begin = std::uint64_t(non_negative_int(off->get_array()[0], file, name, "data_offsets"));
  p.end = std::uint64_t(non_negative_int(off->get_array()[1], file, name, "data_offsets"));
  const std::string range = "data_offsets [" + std::to_string(p.begin) + ", " + std::to_string(p.end) + "]";
  if (p.begin > p.end) throw model_error(file, name, range + " has begin > end");
  if (p.end > data_bytes)
    throw model_error(file, name, range + " exceed the data section of " + std::to_string(data_bytes) + " bytes");
  if (p.end - p.begin != bytes)
    throw model_error(file, name, "shape " + shape_text(p.entry.shape) + " x " + dname + " = " + std::to_string(bytes) +
                                      " bytes but data_offsets span " + std::to_string(p.end - p.begin));
  p.entry.bytes = std::size_t(bytes);
  return p;
}

std::filesystem::path safe_shard_path(const std::filesystem::path& dir, const std::filesystem::path& index,
                                      const std::string& tensor, const std::string& shard) {
  const std::filesystem::path rel(shard);
  bool escapes = shard.empty() || rel.is_absolute() || rel.has_root_name() || rel.has_root_directory();
  for (const auto& part : rel) escapes = escapes || part == "..";
  if (escapes)
    throw model_error(index, "weight_map." + tensor,
                      "shard \"" + shard + "\" is not a file name inside the checkpoint directory");
  return dir / rel;
}

}  // namespace

tensor_view tensor_entry::view() const {
  tensor_view v;
  v.data = const_cast<std::byte*>(data);  // views are untyped by constness; the mapping is read-only
  v.type = type;
  v.rank = int(shape.size());
  v.where = memory_kind::host;
  std::int64_t stride = 1;
  for (int k = v.rank - 1; k >= 0; --k) {
    v.shape[std::size_t(k)] = shape[std::size_t(k)];
    v.strides[std::size_t(k)] = stride;
    stride *= shape[std::size_t(k)];
  }
  return v;
}

safetensors_file::safetensors_file(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw model_error(path, "", "cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    throw model_error(path, "", "cannot stat: " + err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw model_error(path, "", "not a regular file");
  }
  const auto file_bytes = std::uint64_t(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    throw model_error(path, "", "file has " + std::to_string(file_bytes) +
                                    " bytes, too short for the 8-byte header length");
  }
  // MAP_PRIVATE + PROT_READ: the checkpoint is never written, and pages are
  // shared with the page cache. The mapping outlives the descriptor.
  void* map = ::mmap(nullptr, std::size_t(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_err = map == MAP_FAILED ? errno_text() : "";
  ::close(fd);
  if (map == MAP_FAILED) throw model_error(path, "", "mmap failed: " + map_err);
  map_ = map;
  map_bytes_ = std::size_t(file_bytes);

  try {
    const auto* bytes = static_cast<const std::byte*>(map_);
    // The header length is a little-endian u64 whatever the host's order.
    std::uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | std::uint64_t(bytes[i]);
    if (header_bytes > file_bytes - 8)
      throw model_error(path, "header", "header says " + std::to_string(header_bytes) +
                                            " bytes of header but file has " + std::to_string(file_bytes - 8) +
                                            " bytes after the length field");
    if (header_bytes > max_header_bytes)
      throw model_error(path, "header", "header length " + std::to_string(header_bytes) +
                                            " exceeds the " + std::to_string(max_header_bytes) + "-byte limit");
    const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), std::size_t(header_bytes));
    json::error_code ec;
    const json::value header = json::parse(header_text, ec);
    if (ec) throw model_error(path, "header", "invalid JSON: " + ec.message());
    if (!header.is_object()) throw model_error(path, "header", "expected a JSON object, found " + short_json(header));

    const std::uint64_t data_start = 8 + header_bytes;
    const std::uint64_t data_bytes = file_bytes - data_start;
    std::vector<parsed_entry> entries;
    for (const auto& kv : header.get_object()) {
      const std::string key(kv.key());
      if (key == "__metadata__") {
        if (!kv.value().is_object())
          throw model_error(path, key, "expected an object of strings, found " + short_json(kv.value()));
        for (const auto& m : kv.value().get_object()) {
          if (!m.value().is_string())
            throw model_error(path, key + "." + std::string(m.key()),
                              "expected a string value, found " + short_json(m.value()));
          metadata_[std::string(m.key())] = std::string(m.value().get_string());
        }
        continue;
      }
      entries.push_back(parse_entry(key, kv.value(), path, data_bytes));
    }

    // No two tensors may share bytes: sort by begin, each must start at or
    // after the previous end. Empty tensors occupy nothing.
    std::vector<const parsed_entry*> order;
    for (const auto& e : entries)
      if (e.end > e.begin) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < order.size(); ++i)
      if (order[i]->begin < order[i - 1]->end)
        throw model_error(path, order[i]->entry.name,
                          "data_offsets [" + std::to_string(order[i]->begin) + ", " + std::to_string(order[i]->end) +
                              "] overlap tensor " + order[i - 1]->entry.name + " at [" +
                              std::to_string(order[i - 1]->begin) + ", " + std::to_string(order[i - 1]->end) + "]");

    // The reference writer pads the header so the data section starts
    // 8-byte aligned and orders tensors so each stays aligned. A file that
    // does not is still valid: its misaligned tensors are copied to aligned
    // memory rather than handing out misaligned float pointers.
    const std::byte* data = bytes + data_start;
    auto misaligned = [&](const parsed_entry& e) {
      return std::uintptr_t(data + e.begin) % dtype_size(e.entry.type) != 0;
    };
    std::size_t copy_words = 0;
    for (const auto& e : entries)
      if (misaligned(e)) copy_words += (e.entry.bytes + 7) / 8;
    aligned_copy_.resize(copy_words);
    std::size_t next_word = 0;
    for (auto& e : entries) {
      if (misaligned(e)) {
        auto* dst = reinterpret_cast<std::byte*>(aligned_copy_.data() + next_word);
        std::memcpy(dst, data + e.begin, e.entry.bytes);
        e.entry.data = dst;
        next_word += (e.entry.bytes + 7) / 8;
      } else {
        e.entry.data = data + e.begin;
      }
      tensors_.emplace(e.entry.name, std::move(e.entry));
    }
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, map_bytes_);
}

checkpoint::checkpoint(const std::filesystem::path& dir) : dir_(dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw model_error(dir, "", "not a checkpoint directory");
  const auto single = dir / "model.safetensors";
  const auto index = dir / "model.safetensors.index.json";
  // transformers looks for the single file first, then the index.
  if (std::filesystem::exists(single, ec)) {
    files_.push_back(std::make_unique<safetensors_file>(single));
    for (const auto& [name, entry] : files_.back()->tensors()) index_[name] = &entry;
    return;
  }
  if (!std::filesystem::exists(index, ec))
    throw model_error(dir, "", "no model.safetensors or model.safetensors.index.json in " + dir.string());
  index_file_ = index;

  std::ifstream in(index, std::ios::binary);
  if (!in) throw model_error(index, "", "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  json::error_code jec;
  const json::value root = json::parse(text.str(), jec);
  if (jec) throw model_error(index, "", "invalid JSON: " + jec.message());
  const json::value* map = root.is_object() ? root.get_object().if_contains("weight_map") : nullptr;
  if (!map || !map->is_object()) throw model_error(index, "weight_map", "missing or not an object");

  std::map<std::string, safetensors_file*> shards;
  for (const auto& kv : map->get_object()) {
    const std::string tensor(kv.key());
    if (!kv.value().is_string())
      throw model_error(index, "weight_map." + tensor, "expected a shard file name, found " + short_json(kv.value()));
    const std::string shard(kv.value().get_string());
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const auto shard_path = safe_shard_path(dir, index, tensor, shard);
      if (!std::filesystem::is_regular_file(shard_path, ec))
        throw model_error(index, "weight_map." + tensor, "shard " + shard + " does not exist in " + dir.string());
      files_.push_back(std::make_unique<safetensors_file>(shard_path));
      it = shards.emplace(shard, files_.back().get()).first;
    }
    const auto& tensors = it->second->tensors();
    const auto found = tensors.find(tensor);
    if (found == tensors.end())
      throw model_error(index, "weight_map." + tensor, "tensor is mapped to shard " + shard + ", which does not contain it");
    index_[tensor] = &found->second;
  }
}

const tensor_entry* checkpoint::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const tensor_entry& checkpoint::get(const std::string& name) const {
  if (const tensor_entry* e = find(name)) return *e;
  const auto where = index_file_.empty() ? (files_.empty() ? dir_ : files_.front()->path()) : index_file_;
  throw model_error(where, name, "tensor not found in the checkpoint (" + std::to_string(index_.size()) + " tensors)");
}

std::vector<std::string> checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace specpipe
