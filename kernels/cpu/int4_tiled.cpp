#include "kernels/int4_tiled.hpp"

#include <stdexcept>
#include <string>

#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

namespace {

std::int64_t tiles_of(std::int64_t out) { return (out + int4_tile_rows - 1) / int4_tile_rows; }
std::int64_t chunks_of(std::int64_t in) { return (in + int4_tile_cols - 1) / int4_tile_cols; }

void check_rows_matrix(const int4_matrix& m) {
  if (m.empty() || !m.scale || !m.zero)
    throw std::invalid_argument("tile_int4: the packed matrix has no codes, scales or zeros");
  if (m.out <= 0 || m.in <= 0 || m.group <= 0 || m.group % 2 != 0)
    throw std::invalid_argument("tile_int4: bad packed shape out=" + std::to_string(m.out) + " in=" +
                                std::to_string(m.in) + " group=" + std::to_string(m.group) +
                                " (sizes positive, group even)");
  if (m.code_stride < (m.in + 1) / 2)
    throw std::invalid_argument("tile_int4: code_stride " + std::to_string(m.code_stride) +
                                " bytes is shorter than a row of " + std::to_string(m.in) + " 4-bit codes");
}

void check_tiled_element(const int4_tiled_matrix& t, std::int64_t row, std::int64_t col, const char* who) {
  if (t.empty() || !t.scale_zero || t.out <= 0 || t.in <= 0 || t.group <= 0)
    throw std::invalid_argument(std::string(who) + ": empty or malformed tiled matrix (out=" + std::to_string(t.out) +
                                " in=" + std::to_string(t.in) + " group=" + std::to_string(t.group) + ")");
  if (row < 0 || row >= t.out || col < 0 || col >= t.in)
    throw std::invalid_argument(std::string(who) + ": (" + std::to_string(row) + ", " + std::to_string(col) +
                                ") outside [" + std::to_string(t.out) + ", " + std::to_string(t.in) + "]");
}

}  // namespace

std::int64_t int4_tiled_code_bytes(std::int64_t out, std::int64_t in) {
  return tiles_of(out) * chunks_of(in) * int4_tile_chunk_bytes;
}

std::int64_t int4_tiled_scale_zero_size(std::int64_t out, std::int64_t in, std::int64_t group) {
  return tiles_of(out) * ((in + group - 1) / group) * int4_tile_rows * 2;
}

std::int64_t int4_tiled_code_nibble(std::int64_t row, std::int64_t col, std::int64_t in) {
  const std::int64_t tile = row / int4_tile_rows, half = (row % int4_tile_rows) / 8, g = row % 8;
  const std::int64_t chunk = col / int4_tile_cols, word = (col % int4_tile_cols) / 32, t = (col % 32) / 8;
  const std::int64_t lane = 4 * g + t;
  const std::int64_t word_byte = (((tile * chunks_of(in) + chunk) * 2 + half) * 32 + lane) * 16 + 4 * word;
  return 2 * word_byte + int4_tiled_word_nibble(int(col % 8));
}

std::int64_t int4_tiled_scale_offset(std::int64_t row, std::int64_t group_index, std::int64_t groups) {
  const std::int64_t tile = row / int4_tile_rows, g = row % 8, half = (row % int4_tile_rows) / 8;
  return ((tile * groups + group_index) * 8 + g) * 4 + 2 * half;
}

int4_tiled_matrix int4_tiled_weights::view() const {
  int4_tiled_matrix m;
  m.codes = codes.data();
  m.scale_zero = scale_zero.data();
  m.out = out;
  m.in = in;
  m.group = group;
  return m;
}

int4_tiled_weights tile_int4(const int4_matrix& m) {
  check_rows_matrix(m);
  int4_tiled_weights t;
  t.out = m.out;
  t.in = m.in;
  t.group = m.group;
  t.codes.assign(std::size_t(int4_tiled_code_bytes(m.out, m.in)), 0);
  t.scale_zero.assign(std::size_t(int4_tiled_scale_zero_size(m.out, m.in, m.group)), 0);
  const std::int64_t groups = m.groups();
  for (std::int64_t r = 0; r < m.out; ++r) {
    const std::uint8_t* row = m.codes + r * m.code_stride;
    // Word by word (8 columns), each code to its nibble of the word; the
    // row's padding bytes and an odd last column's high nibble are not read.
    for (std::int64_t c0 = 0; c0 < m.in; c0 += 8) {
      std::uint32_t word = 0;
      for (int e = 0; e < 8 && c0 + e < m.in; ++e) {
        const std::uint32_t q = (row[(c0 + e) / 2] >> (4 * ((c0 + e) % 2))) & 15u;
        word |= q << (4 * int4_tiled_word_nibble(e));
      }
      std::uint8_t* dst = t.codes.data() + int4_tiled_code_nibble(r, c0, m.in) / 2;
      for (int b = 0; b < 4; ++b) dst[b] = std::uint8_t(word >> (8 * b));
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      std::uint16_t* sz = t.scale_zero.data() + int4_tiled_scale_offset(r, g, groups);
      sz[0] = m.scale[r * groups + g];
      sz[1] = m.zero[r * groups + g];
    }
  }
  return t;
}

std::uint8_t int4_tiled_code(const int4_tiled_matrix& t, std::int64_t row, std::int64_t col) {
  check_tiled_element(t, row, col, "int4_tiled_code");
  const std::int64_t nibble = int4_tiled_code_nibble(row, col, t.in);
  return std::uint8_t((t.codes[nibble / 2] >> (4 * (nibble % 2))) & 15u);
}

float int4_tiled_weight(const int4_tiled_matrix& t, std::int64_t row, std::int64_t col) {
  const unsigned q = int4_tiled_code(t, row, col);
  const std::uint16_t* sz = t.scale_zero + int4_tiled_scale_offset(row, col / t.group, t.groups());
  return f16_to_f32(sz[1]) + f16_to_f32(sz[0]) * float(q);
}

}  // namespace specpipe::kernels::cpu
