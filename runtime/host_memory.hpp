// Host memory: whether a model file fits in the memory this machine has left, checked before
// it is loaded, so that a package too large for the machine fails with an error naming the
// component and both sizes (Error(invalid_argument): CLI exit 2, a served job fails with it)
// instead of the process being killed by the kernel's out-of-memory killer halfway through the load.
//
// The figure is /proc/meminfo's MemAvailable (the kernel's estimate of what new allocations
// can get without swapping: free memory plus reclaimable page cache). VGEN_MEMORY_AVAILABLE
// (bytes, a plain decimal integer) replaces it: an operator's cap below the machine's memory
// (leave room for other processes), and how tests fake a small machine.
//
// Thread-safety: stateless; every function may be called from any thread. Blocking: reads one
// small /proc file. Cancellation: none needed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vgen {

// MemAvailable of a /proc/meminfo text, in bytes; nullopt when the line is missing or malformed.
std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo);

// VGEN_MEMORY_AVAILABLE when set (Error(invalid_argument) naming it when it is not a whole
// number of bytes), else /proc/meminfo's MemAvailable; nullopt when neither is known (not Linux).
std::optional<std::uint64_t> available_memory_bytes();

// "5.68 GB" (decimal units, as file sizes are usually shown), "812 MB", "17 kB", "12 bytes".
std::string format_bytes(std::uint64_t bytes);

// Throws Error(invalid_argument) when `bytes` is more than `available`:
//   "<what> is 5.68 GB but only 3.20 GB of memory is available (MemAvailable; VGEN_MEMORY_AVAILABLE
//    overrides): it cannot be loaded on this machine"
// Nothing happens when `available` is unknown (nullopt).
void check_fits_in_memory(std::string_view what, std::uint64_t bytes, std::optional<std::uint64_t> available);

}  // namespace vgen
