#include "runtime/host_memory.hpp"

#include "runtime/errors.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace vgen {

namespace {

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view key = "MemAvailable:";
  for (std::size_t pos = 0; pos < meminfo.size();) {
    auto eol = meminfo.find('\n', pos);
    if (eol == std::string_view::npos) eol = meminfo.size();
    auto line = meminfo.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(key)) continue;
    line.remove_prefix(key.size());
    const auto first = line.find_first_not_of(' ');
    if (first == std::string_view::npos) return std::nullopt;
    line.remove_prefix(first);
    const auto space = line.find(' ');
    const auto kb = parse_u64(line.substr(0, space));
    if (!kb || space == std::string_view::npos || line.substr(space + 1) != "kB") return std::nullopt;
    if (*kb > UINT64_MAX / 1024) return std::nullopt;
    return *kb * 1024;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> available_memory_bytes() {
  if (const char* env = std::getenv("VGEN_MEMORY_AVAILABLE"); env && *env) {
    const auto v = parse_u64(env);
    if (!v) throw_error(ErrorKind::invalid_argument, "VGEN_MEMORY_AVAILABLE: '" + truncate_utf8(env, 40) + "' is not a number of bytes");
    return v;
  }
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_mem_available(text.str());
}

std::string format_bytes(std::uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= 1'000'000'000ull) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (bytes >= 1'000'000ull) std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else if (bytes >= 1'000ull) std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  return buf;
}

void check_fits_in_memory(std::string_view what, std::uint64_t bytes, std::optional<std::uint64_t> available) {
  if (!available || bytes <= *available) return;
  throw_error(ErrorKind::invalid_argument,
              std::string(what) + " is " + format_bytes(bytes) + " but only " + format_bytes(*available) +
                  " of memory is available (MemAvailable; VGEN_MEMORY_AVAILABLE overrides): it cannot be loaded on this machine");
}

}  // namespace vgen
