#include "stages/exec/chunked_decode.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/errors.hpp"
#include "stages/model/model_backend.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

// A module whose packed methods say what the exporter's do, from a fake VAE: frame 0 -> one
// video frame, each later latent frame -> 4, each the latent's channel sum plus the running
// sum of the frames before it (state: that sum), so a decoder that lost its state is wrong.
struct FakePackedVae final : Module {
  at::Tensor call(std::string_view method, const std::vector<at::Tensor>& in) const override {
    const auto z = in.at(0);  // [B, C, 1, h, w]
    at::Tensor carried = at::zeros({z.size(0), 1, 1, z.size(3), z.size(4)});
    if (method == kDecodeStepPacked) carried = in.at(1).narrow(0, 2, carried.numel()).view(carried.sizes());
    else if (method != kDecodeFirstPacked) throw_error(ErrorKind::invalid_argument, "model has no method '" + std::string(method) + "'");
    const auto sum = z.sum(1, true) + carried;
    const std::int64_t t = method == kDecodeFirstPacked ? 1 : 4;
    const auto video = sum.repeat({1, 3, t, 1, 1}).repeat_interleave(8, 3).repeat_interleave(8, 4).clamp(-1, 1);
    auto head = at::tensor({5.0f, float(video.size(0)), 3.0f, float(t), float(video.size(3)), float(video.size(4))});
    auto state_head = at::tensor({1.0f, 1.0f});  // fake: not the exporter's shapes, opaque anyway
    return at::cat({head, video.reshape(-1), state_head, sum.reshape(-1)});
  }
  c10::Device device() const override { return at::kCPU; }
  c10::ScalarType dtype() const override { return at::kFloat; }
};

}  // namespace

TEST_CASE("has_chunked_decode: both packed methods or none") {
  CHECK(has_chunked_decode({"forward", "decode_first_packed", "decode_step_packed"}));
  CHECK_FALSE(has_chunked_decode({"forward", "decode_first", "decode_step", "decode_unclamped"}));
  CHECK_FALSE(has_chunked_decode({"decode_first_packed"}));
}

TEST_CASE("package_has_chunked_decode: the packed methods, and no compiled decoder (watched bytes = unwatched bytes)") {
  auto manifest = boost::json::parse(R"({"components": {"vae_decoder": {"file": "vae_decoder.pt",
      "methods": ["forward", "decode_first_packed", "decode_step_packed"]}}})").as_object();
  CHECK(package_has_chunked_decode(manifest, "vae_decoder"));
  CHECK_FALSE(package_has_chunked_decode(manifest, "text_encoder"));
  // A compiled whole-clip decode and the TorchScript chunks differ in the last bits: such a
  // package decodes whole, so a watched job's file stays the unwatched one's.
  manifest["components"].as_object()["vae_decoder"].as_object()["compiled"] =
      boost::json::parse(R"({"cpu": {"backend": "aoti", "file": "vae_decoder.cpu.pt2"}})");
  CHECK_FALSE(package_has_chunked_decode(manifest, "vae_decoder"));
}

TEST_CASE("ChunkedDecoder: unpacks each chunk's frames and carries the state to the next call") {
  FakePackedVae vae;
  const auto z = at::rand({2, 4, 3, 2, 3}) * 0.05;  // sums stay inside the clamp
  std::vector<std::int64_t> frames;
  const auto out = chunked_decode(vae, z, [&](const at::Tensor& c) { frames.push_back(c.size(2)); });
  CHECK(frames == std::vector<std::int64_t>{1, 4, 4});
  REQUIRE(out.sizes() == at::IntArrayRef({2, 3, 9, 16, 24}));
  const auto s0 = z.narrow(2, 0, 1).sum(1), s1 = s0 + z.narrow(2, 1, 1).sum(1), s2 = s1 + z.narrow(2, 2, 1).sum(1);
  for (std::int64_t b = 0; b < 2; ++b) {
    CHECK(out[b][1][0][0][0].item<float>() == doctest::Approx(s0[b][0][0][0].item<float>()));
    CHECK(out[b][2][4][8][8].item<float>() == doctest::Approx(s1[b][0][1][1].item<float>()));
    CHECK(out[b][0][8][15][23].item<float>() == doctest::Approx(s2[b][0][1][2].item<float>()));
  }
}

TEST_CASE("ChunkedDecoder: a module without the packed methods is refused as invalid_argument") {
  struct Plain final : Module {
    at::Tensor call(std::string_view method, const std::vector<at::Tensor>&) const override {
      throw_error(ErrorKind::invalid_argument, "model has no method '" + std::string(method) + "'");
    }
    c10::Device device() const override { return at::kCPU; }
    c10::ScalarType dtype() const override { return at::kFloat; }
  } plain;
  ChunkedDecoder decoder(plain);
  try {
    decoder.next(at::zeros({1, 4, 1, 2, 2}));
    FAIL("decoded without the method");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
  }
}

// The tiny random Wan VAE as the exporter writes it (the fixture stages.wan_tiled_vae_parity_reference,
// tools/reference/wan_tiled_vae_parity.py): its packed chunks joined are its forward's frames,
// bit for bit, and within 1e-5 (max abs, float32) of diffusers' AutoencoderKLWan.decode.
TEST_CASE("chunked_decode: the exported tiny Wan VAE decodes the same frames chunk by chunk as whole") {
  const char* dir = std::getenv("VGEN_WAN_TILED_VAE_PARITY_DIR");
  if (!dir || !*dir || !fs::is_regular_file(fs::path(dir) / "parity.json")) {
    WARN_MESSAGE(false, "VGEN_WAN_TILED_VAE_PARITY_DIR not set (no tooling Python): skipped");
    return;
  }
  std::ifstream in(fs::path(dir) / "parity.json");
  const auto info = nlohmann::json::parse(in);
  auto ref = torch::jit::load(info["reference"].get<std::string>());
  auto vae = load_module("torchscript", info["decoder"].get<std::string>(), "cpu", at::kFloat);
  const auto z = ref.attr("latents").toTensor();
  REQUIRE(z.size(2) >= 2);  // at least one step after the first chunk
  int emitted = 0;
  const auto chunked = chunked_decode(*vae, z, [&](const at::Tensor&) { ++emitted; });
  const auto whole = vae->forward({z});
  CHECK(emitted == z.size(2));
  REQUIRE(chunked.sizes() == whole.sizes());
  CHECK(at::equal(chunked, whole));
  const double vs_diffusers = (chunked - ref.attr("frames_untiled").toTensor()).abs().max().item<double>();
  MESSAGE("chunked vs diffusers' whole-clip decode: max |diff| " << vs_diffusers);
  CHECK(vs_diffusers <= 1e-5);
  // A batch of two clips too, as a decode group runs.
  const auto pair = at::cat({z, z.flip(2)}, 0);
  CHECK(at::equal(chunked_decode(*vae, pair), vae->forward({pair})));
}
