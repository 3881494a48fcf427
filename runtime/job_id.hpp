// Job ids: globally unique and time-ordered, as RFC 9562 UUIDv7 in lowercase text
// ("0193b5d6-8a1c-7f3e-9b2a-4c5d6e7f8091"): 48 bits of Unix milliseconds, then 74 random
// bits, of which the first 12 (rand_a) count up within one millisecond so that ids made by one
// process sort in the order they were made. Two processes (a fleet of workers, a restarted
// server) never hand out the same id, unlike the old per-process "job-N".
// Thread-safety: new_job_id() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vgen {

std::string new_job_id();
// Whether `id` is a UUIDv7 in the form new_job_id() writes.
bool is_job_id(std::string_view id);
// The creation time a UUIDv7 id carries (nullopt for other ids).
std::optional<std::chrono::system_clock::time_point> job_id_time(std::string_view id);

}  // namespace vgen
