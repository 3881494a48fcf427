#include "runtime/registry.hpp"

namespace vgen::detail {

void throw_unnamed(const std::string& kind) {
  const bool vowel = !kind.empty() && std::string_view("aeiou").find(kind.front()) != std::string_view::npos;
  throw_error(ErrorKind::invalid_argument, std::string(vowel ? "an " : "a ") + kind + " needs a name");
}

void throw_duplicate(const std::string& kind, const std::string& name) {
  throw_error(ErrorKind::invalid_argument, kind + " '" + name + "' is already registered");
}

void throw_unknown(const std::string& kind, std::string_view name, const std::vector<std::string>& known) {
  throw_error(ErrorKind::invalid_argument, "unknown " + kind + " '" + std::string(name) + "' (known: " + join_names(known) + ")");
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace vgen::detail
