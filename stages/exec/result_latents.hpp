// Result latents (issue 34 item 4): a finished job's final latents kept beside its output file,
// so that extending that file later (HTTP / OpenAI extend by the job's id, or `vgen extend` of
// the same file) takes the overlap's latents from them instead of encoding its decoded frames
// again (a family that extends by latents: SpecLimits::extend_overlap, FamilyJob::video_latents).
//
// Where: <output's folder>/.vgen-latents/<sha256 of the output file>.latents. The key is what
// admission computes for an extend job's video (JobSpec::video_sha256), so a job whose video
// is byte for byte a kept output finds them, whichever front end sent it: the model set looks
// beside the video (`vgen extend` of a file) and in its own output folder (HTTP / OpenAI extend
// by id, whose bytes arrive as an upload). A copy in another folder is encoded as any video is. The file is the checkpoint format
// (stages/exec/checkpoint.hpp: encode_checkpoint, ending with its own SHA-256) with identity
// "result-latents|<package id>|<sha256>", so latents of another package, a damaged file or a
// file whose name lies are ignored. Nothing removes them but the user (one file per output;
// the latents are ~1/48 of the raw frames' bytes: 16 channels per 8x8x4 pixels x 3).
//
// Threads: blocking file I/O (hashing the output, reading, writing): call them on a worker pool.
// Thread-safe: each write is atomic (temp, fsync, rename). Cancellation: none.
// Includes LibTorch (api/ never sees it; the model set's stages call it).
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>
#include <vector>

namespace vgen {

// <folder>/.vgen-latents/<sha256>.latents
std::filesystem::path result_latents_file(const std::filesystem::path& folder, const std::string& sha256);

// Hashes `output` and writes `latents` ([1, C, F', H', W'] float32) under its hash. Returns the
// file written. Errors from the file system propagate (the caller logs and goes on: the latents
// are an optimisation).
std::filesystem::path keep_result_latents(const std::filesystem::path& output, const std::string& package_id,
                                          const at::Tensor& latents);

// The latents kept in the first of `folders` that has them for an output whose bytes hash to
// `sha256`, made by a job of `package_id`; undefined when there are none, they are another
// package's, or the file does not verify.
at::Tensor find_result_latents(const std::vector<std::filesystem::path>& folders, const std::string& sha256,
                               const std::string& package_id);

}  // namespace vgen
