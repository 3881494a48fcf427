// LTX-2's audio decoder against diffusers on tiny random components (float32): packed latents
// as LTX2Pipeline.__call__ holds them after its loop, decoded here and by diffusers' own
// post-loop path (the fixture stages.ltx2_audio_parity_reference, tools/reference/
// ltx2_audio_parity.py), agree to 1e-4 per sample; refusals name what is missing.
#include "stages/families/ltx2/ltx2_audio.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

json::object read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(std::string(std::istreambuf_iterator<char>(in), {})).as_object();
}

// The exported components as a package description, as load_model_package would give it.
ModelPackage package_of(const json::object& parity) {
  const fs::path dir = std::string(parity.at("package").as_string());
  const auto entries = read_json(std::string(parity.at("manifest").as_string()));
  ModelPackage p;
  p.dir = dir;
  p.family = "ltx2";
  p.dtype = "float32";
  for (const auto& [name, entry] : entries.at("components").as_object()) {
    ModelComponent c;
    c.file = fs::canonical(dir / std::string(entry.at("file").as_string()));
    c.format = std::string(entry.at("format").as_string());
    c.dtype = std::string(entry.at("dtype").as_string());
    p.components.emplace(std::string(name), c);
  }
  p.manifest["audio"] = entries.at("audio");
  return p;
}

const json::object* parity_or_skip() {
  static std::optional<json::object> parity;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const char* dir = std::getenv("VGEN_LTX2_AUDIO_PARITY_DIR");
    if (dir && *dir && fs::is_regular_file(fs::path(dir) / "parity.json")) parity = read_json(fs::path(dir) / "parity.json");
  }
  if (!parity) WARN_MESSAGE(false, "VGEN_LTX2_AUDIO_PARITY_DIR not set (no tooling Python): skipped");
  return parity ? &*parity : nullptr;
}

}  // namespace

TEST_CASE("decoded audio matches diffusers' LTX2Pipeline audio to 1e-4" * doctest::timeout(300)) {
  const auto* parity = parity_or_skip();
  if (!parity) return;
  const auto decoder = Ltx2AudioDecoder::load(package_of(*parity));
  CHECK(decoder->config().sample_rate == 8000);
  CHECK(decoder->config().channels == 2);
  auto tensors = torch::jit::load(std::string(parity->at("reference").as_string()));
  for (const char* name : {"one", "two"}) {
    CAPTURE(name);
    const auto latents = tensors.attr(std::string("latents_") + name).toTensor();
    const auto want = tensors.attr(std::string("audio_") + name).toTensor();  // [B, ch, S]
    const auto tracks = decoder->decode(latents, "cpu");
    REQUIRE(static_cast<std::int64_t>(tracks.size()) == want.size(0));
    double worst = 0;
    for (std::size_t b = 0; b < tracks.size(); ++b) {
      const auto& t = tracks[b];
      CHECK(t.sample_rate == 8000);
      CHECK(t.channels == 2);
      REQUIRE(static_cast<std::int64_t>(t.frames()) == want.size(2));
      const auto got = at::from_blob(const_cast<float*>(t.samples.data()), {want.size(2), 2}).transpose(0, 1);
      worst = std::max(worst, (got - want[static_cast<std::int64_t>(b)]).abs().max().item<double>());
    }
    MESSAGE(std::string(name), ": max |vgen - diffusers| = ", worst);
    CHECK(worst <= 1e-4);
  }
}

TEST_CASE("latent frames are counted as LTX2Pipeline counts them") {
  Ltx2AudioConfig c;  // 16 kHz, hop 160, compression 4: 25 latent frames per second
  CHECK(c.latent_frames(121, 24.0) == 126);  // round(5.0417 * 25)
  CHECK(c.latent_frames(9, 8.0) == 28);      // round(28.125)
  CHECK(c.latent_frames(25, 25.0) == 25);
}

TEST_CASE("a package without sound, or with a malformed audio object, is refused by name") {
  ModelPackage p;
  p.dir = "/nowhere/pkg";
  auto refused = [&](const char* word) {
    CAPTURE(word);
    try {
      Ltx2AudioDecoder::load(p);
      FAIL("loaded");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(word) != std::string::npos);
      CHECK(std::string(e.what()).find("/nowhere/pkg") != std::string::npos);
    }
  };
  refused("\"audio\"");
  p.manifest["audio"] = json::object{{"sample_rate", 8000}, {"channels", 3}};
  refused("audio.channels");
  p.manifest["audio"] = json::object{{"sample_rate", 8000}, {"channels", 2}, {"latent_channels", 2},
                                     {"latent_mel_bins", 2}, {"mel_bins", 8}, {"latents_mean", json::array{0, 0, 0}},
                                     {"latents_std", json::array{1, 1, 1, 1}}};
  refused("audio.latents_mean");
  p.manifest["audio"].as_object()["latents_mean"] = json::array{0, 0, 0, 0};
  refused("\"audio_vae\"");
}

TEST_CASE("latents of another shape are refused") {
  const auto* parity = parity_or_skip();
  if (!parity) return;
  const auto decoder = Ltx2AudioDecoder::load(package_of(*parity));
  CHECK_THROWS_AS(decoder->decode(at::zeros({1, 4, 4, 4}), "cpu"), Error);
  CHECK_THROWS_AS(decoder->decode(at::zeros({1, 4, 15}), "cpu"), Error);
}
