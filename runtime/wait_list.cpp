// WaitList is a template; this translation unit checks that its header is self-contained
// and instantiates the common shapes once.
#include "runtime/wait_list.hpp"

#include <variant>

namespace vgen::detail {
template class WaitList<std::monostate, void(error_code)>;
}  // namespace vgen::detail
