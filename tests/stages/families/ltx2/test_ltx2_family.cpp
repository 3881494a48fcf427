#include "stages/families/ltx2/ltx2_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <fstream>
#include <mutex>

#include "runtime/errors.hpp"
#include "stages/exec/model_set.hpp"
#include "stages/media/audio_track.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/parity_reference.hpp"
#include "tests/support/python_reference.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

using Reference = test::ParityReference;

// Written once by the CTest fixture `stages.ltx2_parity_reference` (tools/reference/ltx2_parity.py).
Reference* reference_or_skip() { return test::parity_reference_or_skip("VGEN_LTX2_PARITY_DIR"); }

struct OutDir {
  fs::path path = vgen::test::temp_dir("vgen-ltx2-out-");
  ~OutDir() { fs::remove_all(path); }
};

// Every step's latents, the frames and the final audio latents of each job, captured around the
// real stages.
struct Capture {
  std::mutex m;
  std::map<std::string, at::Tensor> frames, audio;
  std::map<std::string, std::shared_ptr<const AudioTrack>> tracks;
  std::map<std::string, std::vector<at::Tensor>> steps;
};

std::vector<StageSpec> capturing(std::vector<StageSpec> stages, Capture& cap) {
  for (auto& s : stages) {
    auto inner = s.fn;
    const auto name = s.name;
    s.fn = [inner, name, &cap](Job& job) -> asio::awaitable<void> {
      if (name == "denoise")
        family_job(job)->on_step = [&cap, id = job.id()](int, const at::Tensor& latents) {
          std::lock_guard l(cap.m);
          cap.steps[id].push_back(latents.clone());
        };
      co_await inner(job);
      if (name == "decode") {
        std::lock_guard l(cap.m);
        cap.frames[job.id()] = family_job(job)->frames.clone();
        cap.audio[job.id()] = static_cast<Ltx2Job&>(*family_job(job)).audio_latents.clone();
        cap.tracks[job.id()] = family_job(job)->audio;
      }
    };
  }
  return stages;
}

using test::max_diff;

std::vector<std::shared_ptr<Job>> run_jobs(const fs::path& package, const std::vector<boost::json::object>& jobs,
                                          Capture& cap, const fs::path& out_dir) {
  const auto specs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, specs);
  DevicePool pool(specs);
  ModelSetOptions options;
  options.out_dir = out_dir;
  options.batching.max_batch = 1;
  auto models = std::make_shared<ModelSet>(std::vector<std::pair<std::string, fs::path>>{{"m", package}}, executor, pool, options);
  Pipeline pipeline(executor.get_executor(), capturing(models->stages(), cap));
  pipeline.start();
  auto submit_all = [&]() -> asio::awaitable<std::vector<std::shared_ptr<Job>>> {
    std::vector<std::shared_ptr<Job>> out;
    for (const auto& j : jobs) out.push_back(co_await pipeline.submit(j));
    co_await pipeline.drain();
    co_return out;
  };
  auto done = executor.run_sync(submit_all());
  executor.stop();
  return done;
}

boost::json::object case_json(const nlohmann::json& c, std::uint64_t seed) {
  auto o = test::parity_case_spec(c, c["guidance_scale"].get<double>(), seed);
  o["fps"] = c["frame_rate"].get<double>();
  return o;
}

template <typename Fn>
void check_invalid(Fn&& fn, const std::string& needle) {
  try {
    fn();
    FAIL("expected Error(invalid_argument) mentioning " << needle);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("audio latent frames are LTX2Pipeline's round(duration x latents per second), half to even") {
  Ltx2Config c;  // 16 kHz, hop 160, ratio 4: 25 latent frames per second
  CHECK(ltx2_audio_frames(9, 25.0, c) == 9);
  CHECK(ltx2_audio_frames(17, 24.0, c) == 18);   // 17.708...
  CHECK(ltx2_audio_frames(121, 24.0, c) == 126);  // 126.04...: LTX-2's default clip
  CHECK(ltx2_audio_frames(1, 2.0, c) == 12);     // 12.5 -> 12, as Python's round()
  CHECK(ltx2_audio_frames(3, 2.0, c) == 38);     // 37.5 -> 38
}

TEST_CASE("rope bounds: frames in seconds from the causal first frame, pixels for rows and columns, audio in seconds") {
  Ltx2Config c;
  auto v = ltx2_video_coords(2, 1, 2, 25.0, c);
  REQUIRE(v.sizes() == at::IntArrayRef({1, 3, 4, 2}));
  // Token (f=1, h=0, w=1): frame bounds ((8 + 1 - 8) / 25, (16 + 1 - 8) / 25), rows [0, 32), columns [32, 64).
  CHECK(v[0][0][3][0].item<float>() == doctest::Approx(1.0 / 25));
  CHECK(v[0][0][3][1].item<float>() == doctest::Approx(9.0 / 25));
  CHECK(v[0][0][0][0].item<float>() == 0.0f);  // clamped at 0
  CHECK(v[0][1][3][1].item<float>() == 32.0f);
  CHECK(v[0][2][3][0].item<float>() == 32.0f);
  auto a = ltx2_audio_coords(3, c);
  REQUIRE(a.sizes() == at::IntArrayRef({1, 1, 3, 2}));
  CHECK(a[0][0][0][0].item<float>() == 0.0f);
  CHECK(a[0][0][1][0].item<float>() == doctest::Approx(1 * 160 / 16000.0));  // (4 + 1 - 4) mel frames
  CHECK(a[0][0][1][1].item<float>() == doctest::Approx(5 * 160 / 16000.0));
}

// Runs `names` (cases of `table`, with the reference image for image cases) through the real
// stages and compares every step's video and audio latents and the frames with diffusers'.
static void check_parity(Reference& ref, const char* table, const std::vector<std::string>& names, bool image) {
  const OutDir out;
  const auto seed = ref.info["seed"].get<std::uint64_t>();
  const auto& cases = ref.info[table];
  std::vector<boost::json::object> specs;
  for (const auto& name : names) {
    specs.push_back(case_json(cases[name], seed));
    if (image) specs.back()["image"] = ref.info["image"].get<std::string>();
  }
  Capture cap;
  auto jobs = run_jobs(ref.info["package"].get<std::string>(), specs, cap, out.path);
  REQUIRE(jobs.size() == names.size());
  for (std::size_t n = 0; n < names.size(); ++n) {
    const std::string& name = names[n];
    CAPTURE(name);
    REQUIRE_MESSAGE(jobs[n]->state() == JobState::done, jobs[n]->snapshot().error);
    const auto& got = cap.steps[jobs[n]->id()];
    const int steps = cases[name]["num_inference_steps"].get<int>();
    REQUIRE(static_cast<int>(got.size()) == steps);
    double video = 0, audio = 0;
    for (int i = 0; i < steps; ++i) {
      const auto want_video = ref.get(test::step_key(name, i));  // [1, C, F, H, W]
      const auto want_audio = ref.get(test::step_key(name, i, "audio"));  // [1, La, Ca*M]
      const auto s = want_video.numel();
      REQUIRE(got[i].size(1) == s + want_audio.numel());
      const auto v = got[i].narrow(1, 0, s).reshape({1, want_video.size(2), want_video.size(3), want_video.size(4), want_video.size(1)})
                         .permute({0, 4, 1, 2, 3});
      video = std::max(video, max_diff(v, want_video));
      const auto got_audio = got[i].narrow(1, s, want_audio.numel()).reshape(want_audio.sizes());
      audio = std::max(audio, max_diff(got_audio, want_audio));
      if (i + 1 == steps) CHECK(at::equal(cap.audio[jobs[n]->id()], got_audio));  // the job keeps its last step's audio
    }
    const double frames = test::frames_diff(ref, name, cap.frames[jobs[n]->id()]);
    // The sound: the job's interleaved track against the pipeline's waveform [1, channels, samples].
    const auto& track = cap.tracks[jobs[n]->id()];
    REQUIRE(track);
    const auto want = ref.get("waveform_" + name)[0].transpose(0, 1).contiguous();  // [samples, channels]
    REQUIRE(track->channels == want.size(1));
    const auto got_wave = at::from_blob(const_cast<float*>(track->samples.data()),
                                        {static_cast<std::int64_t>(track->frames()), track->channels}, at::kFloat);
    const double sound = max_diff(got_wave, want);
    MESSAGE(name << ": max |vgen - diffusers| over every step's video latents = " << video << ", audio latents = " << audio
                 << ", frames = " << frames << ", audio samples = " << sound << " (" << track->frames() << " x "
                 << track->channels << " at " << track->sample_rate << " Hz)");
    CHECK(video <= 1e-4);
    CHECK(audio <= 1e-4);
    CHECK(frames <= 1e-4);
    CHECK(sound <= 1e-4);
  }
}

TEST_CASE("vgen's LTX-2 stages reproduce diffusers' LTX2Pipeline: video and audio latents at every step, frames" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  check_parity(*ref, "cases", {"cfg", "nocfg"}, false);
}

TEST_CASE("vgen's LTX-2 image-to-video reproduces diffusers' LTX2ImageToVideoPipeline (image_crf 0)" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  check_parity(*ref, "i2v_cases", {"i2v", "i2v_nocfg"}, true);
}

TEST_CASE("LTX-2 batched and joined jobs (other prompts, seeds, guidance, fps) are within 1e-4 of their solo runs" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  for (const bool image : {false, true}) {
    CAPTURE(image);
    const char* prompts[] = {"a dog barks at a passing car", "a blue square moving up", "rain on a window"};
    std::vector<boost::json::object> specs;
    for (int i = 0; i < 3; ++i) {
      auto s = case_json(ref->info["cases"]["cfg"], 300 + i);
      s["prompt"] = prompts[i];
      s["guidance"] = 2.0 + i;
      s["fps"] = i == 2 ? 23.5 : 24.0;  // 17 frames: still 18 audio frames (one denoise key), another video rope
      if (image) s["image"] = ref->info["image"].get<std::string>();
      specs.push_back(s);
    }
    auto make = [&](int i) { return std::static_pointer_cast<Ltx2Job>(family->create_job(family->validate(specs[i]))); };
    std::vector<std::shared_ptr<Ltx2Job>> together{make(0), make(1), make(2)};
    const auto batched = test::run_group(*family, together);
    double worst = 0;
    for (int i = 0; i < 3; ++i) {
      auto alone = make(i);
      const auto solo = test::run_group(*family, std::vector<std::shared_ptr<Ltx2Job>>{alone});
      worst = std::max({worst, test::worst_step(batched[i], solo[0]), max_diff(together[i]->frames, alone->frames),
                        max_diff(together[i]->audio_latents, alone->audio_latents)});
    }
    MESSAGE("ltx2 " << (image ? "i2v" : "t2v") << " batched vs solo: max |diff| over latents, frames and audio latents = " << worst);
    // The package carries the audio decoder: each job ends with its sound, as long as its clip.
    for (auto& j : together) {
      REQUIRE(j->audio);
      CHECK(j->audio->seconds() == doctest::Approx(17 / 24.0).epsilon(0.1));
      CHECK(j->audio_end >= j->audio_start);
    }
    CHECK(worst <= 1e-4);
    CHECK(max_diff(together[0]->frames, together[1]->frames) > 1e-3);  // the rows differ
    test::check_joined_equals_solo(family, [&](int i) { return make(i); }, 2, image ? "ltx2 i2v" : "ltx2");
  }
  // Image and text jobs never share a denoiser call (per-token timesteps, a frame left unstepped).
  auto text = family->create_job(family->validate(case_json(ref->info["cases"]["cfg"], 1)));
  auto with_image = case_json(ref->info["cases"]["cfg"], 1);
  with_image["image"] = ref->info["image"].get<std::string>();
  auto pictured = family->create_job(family->validate(with_image));
  auto scheduler = family->make_scheduler(*text);
  CHECK(family->denoise_key(*text, *scheduler) != family->denoise_key(*pictured, *scheduler));
}

TEST_CASE("LTX-2 refusals name the field: frames not 8k+1, LoRAs, a shift, a last image") {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  auto spec = case_json(ref->info["cases"]["nocfg"], 1);
  CHECK_NOTHROW(family->validate(spec));
  auto bad = spec;
  bad["frames"] = 12;
  check_invalid([&] { family->validate(bad); }, "frames");
  bad = spec;
  bad["loras"] = boost::json::array{boost::json::object{{"name", "x"}, {"scale", 1.0}}};
  check_invalid([&] { family->validate(bad); }, "loras");
  bad = spec;
  bad["shift"] = 3.0;
  check_invalid([&] { family->validate(bad); }, "shift");
  bad = spec;
  bad["image"] = ref->info["image"].get<std::string>();
  bad["last_image"] = ref->info["image"].get<std::string>();
  check_invalid([&] { family->validate(bad); }, "last_image");
}

TEST_CASE("LTX-2 tokenization is Gemma's for LTX2Pipeline: stripped, [bos] first, padded on the left") {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  auto& f = dynamic_cast<Ltx2Family&>(*family);
  auto [ids, mask] = f.tokenize({"  a dog  ", "", std::string(400, 'x')}, "prompt");
  const auto len = ids.size(1);
  CHECK(mask[1].sum().item<std::int64_t>() == 1);  // the empty prompt is [bos]
  CHECK(ids[1][len - 1].item<std::int64_t>() == f.config().bos_id);
  CHECK(mask[2].sum().item<std::int64_t>() == len);  // truncated to max_length
  CHECK(ids[2][0].item<std::int64_t>() == f.config().bos_id);
  const auto n = mask[0].sum().item<std::int64_t>();
  CHECK(ids[0][len - n].item<std::int64_t>() == f.config().bos_id);
  CHECK(mask[0].narrow(0, 0, len - n).sum().item<std::int64_t>() == 0);
  CHECK(at::equal(f.tokenize({"a dog"}, "prompt").first, ids.narrow(0, 0, 1)));  // stripped
  CHECK_NOTHROW(family->warm_up("cpu"));
}

// The step cache is the generic one (stages/exec/step_cache.hpp): it compares and reuses a job's
// whole row, here the video and audio velocities together.
TEST_CASE("an LTX-2 job with the step cache skips transformer calls and still ends with finite video and audio" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  auto spec = case_json(ref->info["cases"]["nocfg"], 7);
  spec["steps"] = 8;
  spec["step_cache"] = 1.0;
  Capture cap;
  auto jobs = run_jobs(ref->info["package"].get<std::string>(), {spec}, cap, out.path);
  REQUIRE_MESSAGE(jobs[0]->state() == JobState::done, jobs[0]->snapshot().error);
  const auto detail = jobs[0]->snapshot().detail;
  const auto* skipped = detail.if_contains("skipped_steps");
  REQUIRE(skipped);
  MESSAGE("ltx2 step cache 1.0 over 8 steps: skipped " << skipped->to_number<int>() << " transformer calls");
  CHECK(skipped->to_number<int>() >= 1);
  CHECK(at::isfinite(cap.frames[jobs[0]->id()]).all().item<bool>());
  CHECK(at::isfinite(cap.audio[jobs[0]->id()]).all().item<bool>());
}
