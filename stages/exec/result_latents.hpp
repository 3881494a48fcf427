// Result latents (issue 34 item 4): a finished job's final latents kept beside its output file,
// so that extending that file later (HTTP / OpenAI extend by the job's id, or `vgen extend` of
// the same file) takes the overlap's latents from them instead of encoding its decoded frames
// again (a family that extends by latents: SpecLimits::extend_overlap, FamilyJob::video_latents).
// This is the file format and its place; when the model set keeps, finds and removes them is
// stages/exec/kept_latents.hpp.
//
// Where: <output's folder>/.vgen-latents/<output's file name>.<sha256 of the output>.latents.
// The hash is what admission computes for an extend job's video (JobSpec::video_sha256), so a
// job whose video is byte for byte a kept output finds them by it, whatever its name; the
// output's name makes them removable with the output (a deleted video) without reading it, and
// one output name keeps one file (an output written over drops the old one's). The file is the
// checkpoint format (stages/exec/checkpoint.hpp: encode_checkpoint, ending with its own
// SHA-256) with identity "result-latents|<package id>|<sha256>", so latents of another package,
// a damaged file or a file whose name lies are ignored. The latents are ~1/48 of the raw
// frames' bytes (16 channels per 8x8x4 pixels x 3).
//
// Threads: blocking file I/O (hashing the output, reading, writing): call them on a worker pool.
// Thread-safe: each write is atomic (temp, fsync, rename). Cancellation: none.
// Includes LibTorch (api/ never sees it; stages/exec/kept_latents.hpp is its torch-free face).
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>
#include <vector>

namespace vgen {

// <output's folder>/.vgen-latents/<output's file name>.<sha256>.latents
std::filesystem::path result_latents_file(const std::filesystem::path& output, const std::string& sha256);

// Hashes `output` and writes `latents` ([1, C, F', H', W'] float32) under its name and hash,
// then removes the latents of any earlier file of that name. Returns the file written. Errors
// from the file system propagate (the caller counts them and goes on: the latents are an
// optimisation).
std::filesystem::path keep_result_latents(const std::filesystem::path& output, const std::string& package_id,
                                          const at::Tensor& latents);

// Kept latents as found: the file, the SHA-256 of its bytes (what a content key names) and the
// latents read from those same bytes.
struct FoundLatents {
  std::filesystem::path file;
  std::string file_sha256;
  at::Tensor latents;  // undefined: nothing found
};

// The latents kept in the first of `folders` that has a file for an output whose bytes hash to
// `sha256`, made by a job of `package_id` and verifying; latents undefined when there are none.
FoundLatents find_kept_result_latents(const std::vector<std::filesystem::path>& folders, const std::string& sha256,
                                      const std::string& package_id);
// find_kept_result_latents' latents only.
at::Tensor find_result_latents(const std::vector<std::filesystem::path>& folders, const std::string& sha256,
                               const std::string& package_id);

// Removes every latents file kept for `output` (any hash) and their folder once empty; returns
// how many went. Never throws (a file that cannot go stays; nothing reads it without its video).
int remove_result_latents(const std::filesystem::path& output);

}  // namespace vgen
