#include "stages/placeholder_pipeline.hpp"

#include "runtime/content_key.hpp"

#include <boost/json.hpp>

namespace vgen {

namespace asio = boost::asio;

namespace {

// A file stem that cannot escape the output directory.
std::string safe_stem(std::string_view s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return out.empty() ? "clip" : out.substr(0, 80);
}

asio::awaitable<void> preprocess(Job& job) {
  const auto* obj = job.spec().if_object();
  if (!obj) throw_error(ErrorKind::invalid_argument, "job: must be a JSON object");
  const auto* prompt = obj->if_contains("prompt");
  if (!prompt || !prompt->is_string() || prompt->as_string().empty())
    throw_error(ErrorKind::invalid_argument, "prompt: must be a non-empty string");
  PlaceholderResult r;
  const auto key = content_key("placeholder", job.spec());
  r.seed = static_cast<std::uint32_t>(key.bytes[0]) | static_cast<std::uint32_t>(key.bytes[1]) << 8 |
           static_cast<std::uint32_t>(key.bytes[2]) << 16 | static_cast<std::uint32_t>(key.bytes[3]) << 24;
  const auto* name = obj->if_contains("name");
  r.stem = "placeholder-" + safe_stem(name && name->is_string() ? std::string_view(name->as_string()) : job.id());
  job.payload = std::move(r);
  co_return;
}

}  // namespace

std::vector<StageSpec> make_placeholder_stages(const PlaceholderOptions& o) {
  if (!o.compute || !o.codec) throw_error(ErrorKind::invalid_argument, "placeholder pipeline needs compute and codec pools");
  StageFn synthesize = [o](Job& job) -> asio::awaitable<void> {
    auto& r = std::any_cast<PlaceholderResult&>(job.payload);
    for (int step = 1; step <= o.steps; ++step) {
      job.throw_if_cancelled();
      auto draw = [&r, &o] { return make_test_pattern(o.width, o.height, o.frames, o.fps, r.seed); };
      r.frames = co_await o.compute->run(draw);  // the stand-in for one denoising step
      job.report_progress(step, o.steps);
    }
  };
  StageFn encode = [o](Job& job) -> asio::awaitable<void> {
    auto& r = std::any_cast<PlaceholderResult&>(job.payload);
    r.output = o.out_dir / (r.stem + extension_for(o.encode.format));
    auto write = [&r, &o] { encode_to_file(r.frames, r.output, o.encode); };
    co_await o.codec->run(write);
    r.frames = {};  // the encoded file is the result; drop the raw frames
  };
  return {
      {"preprocess", JobState::preprocess, 1, 16, preprocess},
      {"synthesize", JobState::denoise, o.compute->thread_count(), 4, synthesize},
      {"encode", JobState::encode, o.codec->thread_count(), 4, encode},
  };
}

}  // namespace vgen
