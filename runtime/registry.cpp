#include "runtime/registry.hpp"

namespace vgen::detail {

void throw_unnamed(const std::string& kind) { throw_error(ErrorKind::invalid_argument, "a " + kind + " needs a name"); }

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
