#include "runtime/job_id.hpp"

#include <array>
#include <mutex>
#include <random>

namespace vgen {

namespace {

struct Generator {
  std::mutex mutex;
  std::mt19937_64 random{std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32)};
  std::uint64_t last_ms = 0;
  std::uint32_t counter = 0;  // rand_a within last_ms (12 bits)
};

std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string new_job_id() {
  static Generator g;
  std::uint64_t ms = 0, tail = 0;
  std::uint32_t seq = 0;
  {
    std::lock_guard lock(g.mutex);
    ms = unix_ms();
    if (ms <= g.last_ms) {
      ms = g.last_ms;  // the clock went back or stood still: keep counting in the last ms
      if (++g.counter > 0xfff) {  // 4096 ids in one millisecond: borrow the next one
        ++ms;
        g.counter = 0;
      }
    } else {
      g.counter = static_cast<std::uint32_t>(g.random() & 0x7ff);  // random start, room to count
    }
    g.last_ms = ms;
    seq = g.counter;
    tail = g.random();
  }
  std::array<std::uint8_t, 16> b{};
  for (int i = 0; i < 6; ++i) b[i] = static_cast<std::uint8_t>(ms >> (40 - 8 * i));
  b[6] = static_cast<std::uint8_t>(0x70 | ((seq >> 8) & 0x0f));  // version 7
  b[7] = static_cast<std::uint8_t>(seq & 0xff);
  for (int i = 8; i < 16; ++i) b[i] = static_cast<std::uint8_t>(tail >> (8 * (15 - i)));
  b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3f));  // variant 10
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += digits[b[i] >> 4];
    out += digits[b[i] & 0xf];
  }
  return out;
}

bool is_job_id(std::string_view id) {
  if (id.size() != 36) return false;
  for (std::size_t i = 0; i < id.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? id[i] != '-' : hex_value(id[i]) < 0) return false;
  }
  return id[14] == '7' && (hex_value(id[19]) & 0xc) == 0x8;
}

std::optional<std::chrono::system_clock::time_point> job_id_time(std::string_view id) {
  if (!is_job_id(id)) return std::nullopt;
  std::uint64_t ms = 0;
  for (std::size_t i = 0; i < 13; ++i)
    if (id[i] != '-') ms = ms << 4 | static_cast<std::uint64_t>(hex_value(id[i]));
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

}  // namespace vgen
