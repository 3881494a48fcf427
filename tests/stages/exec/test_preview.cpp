#include "stages/exec/preview.hpp"

#include "stages/families/family.hpp"
#include "stages/media/libav.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

// A preview over 2 latent channels: red = channel 0, green = channel 1, blue = 0.5 - channel 0.
LatentPreview two_channel(int temporal_scale = 4, int spatial_scale = 8) {
  return LatentPreview({1, 0, 0, 1, -1, 0}, {0, 0, 0.5}, 2, temporal_scale, spatial_scale);
}

// Decodes PNG bytes with libavcodec into [H, W, 3] uint8.
at::Tensor decode_png(const std::string& bytes, int width, int height) {
  const AVCodec* codec = avcodec_find_decoder(AV_CODEC_ID_PNG);
  REQUIRE(codec);
  av::CodecContextPtr ctx(avcodec_alloc_context3(codec));
  REQUIRE(avcodec_open2(ctx.get(), codec, nullptr) == 0);
  auto packet = av::alloc_packet();
  REQUIRE(av_new_packet(packet.get(), static_cast<int>(bytes.size())) == 0);
  std::memcpy(packet->data, bytes.data(), bytes.size());
  REQUIRE(avcodec_send_packet(ctx.get(), packet.get()) == 0);
  auto frame = av::alloc_frame();
  REQUIRE(avcodec_receive_frame(ctx.get(), frame.get()) == 0);
  REQUIRE(frame->width == width);
  REQUIRE(frame->height == height);
  REQUIRE(frame->format == AV_PIX_FMT_RGB24);
  auto out = at::empty({height, width, 3}, at::kByte);
  for (int y = 0; y < height; ++y)
    std::memcpy(out.data_ptr<std::uint8_t>() + static_cast<std::ptrdiff_t>(y) * width * 3,
                frame->data[0] + static_cast<std::ptrdiff_t>(y) * frame->linesize[0], static_cast<std::size_t>(width) * 3);
  return out;
}

double psnr(const at::Tensor& a, const at::Tensor& b) {
  const double mse = (a.to(at::kDouble) - b.to(at::kDouble)).pow(2).mean().item<double>();
  return 10.0 * std::log10(1.0 / std::max(mse, 1e-12));
}

}  // namespace

TEST_CASE("the projection is weight . latent + bias per pixel, clamped to [0, 1], of the asked latent frame") {
  const auto preview = two_channel();
  auto latents = at::zeros({1, 2, 3, 2, 2}, at::kFloat);
  latents.select(2, 1).select(1, 0).fill_(0.25);   // frame 1: channel 0 = 0.25
  latents.select(2, 1).select(1, 1).fill_(2.0);    // channel 1 = 2 (clamped to 1)
  CHECK(preview.middle_frame(latents) == 1);
  CHECK(preview.decoded_frame(1) == 4);  // latent frame k shows output frame k * temporal_scale
  const auto rgb = preview.image(latents, 1, 1);
  REQUIRE(rgb.sizes() == at::IntArrayRef({2, 2, 3}));
  CHECK(rgb[0][0][0].item<float>() == doctest::Approx(0.25));
  CHECK(rgb[1][1][1].item<float>() == doctest::Approx(1.0));
  CHECK(rgb[0][1][2].item<float>() == doctest::Approx(0.25));  // 0.5 - 0.25
  const auto frame0 = preview.image(latents, 0, 1);
  CHECK(frame0[0][0][2].item<float>() == doctest::Approx(0.5));
  // Upscaled bilinearly: a constant frame stays constant at every pixel.
  const auto big = preview.image(latents, 1, 8);
  CHECK(big.sizes() == at::IntArrayRef({16, 16, 3}));
  CHECK((big.select(2, 0) - 0.25).abs().max().item<float>() < 1e-6);
}

TEST_CASE("wrong factor sizes are refused at construction; a package without factors has no preview") {
  CHECK_THROWS_AS(LatentPreview({1, 0, 0}, {0, 0, 0}, 2, 1, 8), Error);
  CHECK_THROWS_AS(LatentPreview({1, 0, 0, 1, 0, 0}, {0, 0}, 2, 1, 8), Error);
  ModelPackage p;
  p.latent_channels = 2;
  CHECK_FALSE(LatentPreview::of_package(p));
  p.preview_weight = {1, 0, 0, 1, 0, 0};
  p.preview_bias = {0, 0, 0};
  CHECK(LatentPreview::of_package(p));
  CHECK_THROWS_AS(two_channel().image(at::zeros({1, 3, 1, 2, 2}), 0, 1), Error);  // 3 channels, not 2
}

TEST_CASE("render: the middle frame as a PNG that decodes to the projected pixels, at most kMaxSide a side") {
  const auto preview = two_channel();
  auto latents = at::rand({1, 2, 5, 4, 6}, at::kFloat);
  const auto p = preview.render(latents, 3, 10);
  CHECK(p->step == 3);
  CHECK(p->total == 10);
  CHECK(p->content_type == "image/png");
  CHECK(p->width == 48);  // 6 latent pixels x spatial_scale 8
  CHECK(p->height == 32);
  CHECK(p->bytes.substr(1, 3) == "PNG");
  const auto want = (preview.image(latents, 2, 8) * 255.0).round().clamp(0, 255).to(at::kByte);
  CHECK(at::equal(decode_png(p->bytes, p->width, p->height), want));
  // A large latent (Wan at 480 x 832: 60 x 104) is upscaled less, to stay small.
  CHECK(preview.preview_scale(60, 104) == 3);
  CHECK(preview.preview_scale(32, 32) == 8);
  CHECK(preview.preview_scale(1000, 10) == 1);
  const auto wide = preview.render(at::zeros({1, 2, 1, 60, 104}), 1, 1);
  CHECK(wide->width == 312);
  CHECK(wide->height == 180);
}

TEST_CASE("attach_previews: every N steps and at the last, as job events; a failing preview never fails the job") {
  auto job = std::make_shared<Job>("j", boost::json::object{{"prompt", "x"}});
  std::vector<JobEvent> events;
  job->subscribe([&](const JobEvent& e) { events.push_back(e); });
  FamilyJob work;
  attach_previews(*job, work, std::make_shared<LatentPreview>(two_channel()), 2, 5);
  REQUIRE(work.on_step);
  const auto latents = at::zeros({1, 2, 1, 2, 2});
  for (int i = 0; i < 5; ++i) work.on_step(i, latents);
  REQUIRE(events.size() == 3);
  CHECK(preview_of(events[0])->step == 2);
  CHECK(preview_of(events[1])->step == 4);
  CHECK(preview_of(events[2])->step == 5);  // the last step, though not a multiple of 2
  CHECK(latest_preview(*job)->step == 5);

  // Latents the projection cannot take: the job's previews stop, the step goes on.
  FamilyJob broken;
  attach_previews(*job, broken, std::make_shared<LatentPreview>(two_channel()), 1, 3);
  CHECK_NOTHROW(broken.on_step(0, at::zeros({1, 3, 1, 2, 2})));
  CHECK_NOTHROW(broken.on_step(1, latents));
  CHECK(events.size() == 3);

  FamilyJob off;
  attach_previews(*job, off, nullptr, 2, 5);
  CHECK_FALSE(off.on_step);
  attach_previews(*job, off, std::make_shared<LatentPreview>(two_channel()), 0, 5);
  CHECK_FALSE(off.on_step);

  FamilyJob orphan;  // the job ended and was freed: nothing to report to
  {
    auto gone = std::make_shared<Job>("gone", boost::json::object{{"prompt", "x"}});
    attach_previews(*gone, orphan, std::make_shared<LatentPreview>(two_channel()), 1, 1);
  }
  CHECK_NOTHROW(orphan.on_step(0, latents));
}

// The measure: on the bundled model, the preview at a step against the VAE's decoded
// frame of the same latents, reported as PSNR, must beat a flat grey image's.
TEST_CASE("on the bundled model, the preview's PSNR against the decoded frame beats grey at every step" *
          doctest::timeout(300)) {
  const auto dir = fs::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes";
  if (!fs::exists(dir / "manifest.json")) return;  // a checkout without the model
  register_builtin_families();
  auto family = load_family(dir);
  const auto preview = LatentPreview::of_package(family->package());
  REQUIRE(preview);
  auto job = family->create_job(family->validate(boost::json::object{{"prompt", "a red circle moving left"}, {"seed", 7}}));
  family->prepare("cpu", {job.get()});
  auto scheduler = family->make_scheduler(*job);
  family->begin_denoise({job.get()}, "cpu");
  at::Tensor latents = job->state.latents * scheduler->init_noise_sigma();
  const int steps = static_cast<int>(scheduler->timesteps().size(0));
  double worst_margin = 1e9, step_seconds = 0;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto x = scheduler->scale_model_input(latents, i);
    const auto t = scheduler->timesteps()[i];
    std::vector<FamilyJob*> jobs{job.get()};
    latents = scheduler->step(family->predict(PredictCall{jobs, x, t, "cpu"}), i, latents);
    step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if ((i + 1) % 4 != 0) continue;
    auto decoded = family->create_job(job->spec);
    decoded->state.latents = latents.clone();
    family->decode("cpu", {decoded.get()});
    const int mid = preview->middle_frame(latents);
    const auto frame = decoded->frames[preview->decoded_frame(mid)];  // [H, W, 3] in [0, 1]
    const auto shown = preview->image(latents, mid, family->package().spatial_scale);
    REQUIRE(shown.sizes() == frame.sizes());
    const double p = psnr(shown, frame), grey = psnr(at::full_like(frame, 0.5), frame);
    MESSAGE("step " << i + 1 << "/" << steps << ": preview PSNR " << p << " dB, grey " << grey << " dB");
    CHECK(p > grey);
    worst_margin = std::min(worst_margin, p - grey);
  }
  MESSAGE("smallest margin over grey: " << worst_margin << " dB");
  // What a preview costs next to a denoising step (both on the compute thread).
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) preview->render(latents, steps, steps);
  const double render_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10;
  MESSAGE("preview render (" << latents.size(3) * 8 << " px, PNG): " << render_seconds * 1e3 << " ms; a denoising step: "
                             << step_seconds / steps * 1e3 << " ms");
}
