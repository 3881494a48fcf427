#include "stages/families/hunyuan15/hunyuan15_i2v.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <fstream>

#include "runtime/errors.hpp"
#include "stages/families/hunyuan15/hunyuan15_family.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/invalid_argument.hpp"
#include "tests/support/parity_reference.hpp"
#include "tests/support/png.hpp"
#include "tests/support/temp_dir.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

using test::check_invalid;
using Reference = test::ParityReference;

// Written once by the CTest fixture `stages.hunyuan15_i2v_parity_reference` (tools/reference/hunyuan15_i2v_parity.py).
Reference* reference_or_skip() { return test::parity_reference_or_skip("VGEN_HUNYUAN15_I2V_PARITY_DIR"); }

// A picture whose every byte says where it came from: (x, y, channel) -> distinct values.
RgbImage pattern(int w, int h) {
  RgbImage img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.rgb[(static_cast<std::size_t>(y) * w + x) * 3 + c] = static_cast<std::uint8_t>((x * 7 + y * 3 + c * 80) % 256);
  return img;
}

std::uint8_t at_px(const RgbImage& img, int x, int y, int c) { return img.rgb[(static_cast<std::size_t>(y) * img.width + x) * 3 + c]; }

boost::json::object case_json(const nlohmann::json& c, std::uint64_t seed, const std::string& image) {
  auto o = test::parity_case_spec(c, c["guidance_scale"].get<double>(), seed);
  o["image"] = image;
  return o;
}

std::shared_ptr<Hunyuan15Job> make_job(Family& family, const boost::json::object& spec) {
  return std::static_pointer_cast<Hunyuan15Job>(family.create_job(family.validate(spec)));
}

std::shared_ptr<Family> load(Reference& ref) {
  register_builtin_families();
  return load_family(ref.info["package"].get<std::string>());
}

}  // namespace

TEST_CASE("the picture is fitted as diffusers' crop resize: untouched at the size, else cover and cut the centre") {
  const auto same = pattern(32, 32);
  CHECK(hunyuan15_fit_image(same, 32, 32).rgb == same.rgb);
  // Wider than the job: the height already fits, so nothing is resampled, columns 16..47 stay.
  const auto wide = pattern(64, 32);
  const auto cut = hunyuan15_fit_image(wide, 32, 32);
  REQUIRE((cut.width == 32 && cut.height == 32));
  bool centre = true;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      for (int c = 0; c < 3; ++c) centre = centre && std::abs(at_px(cut, x, y, c) - at_px(wide, x + 16, y, c)) <= 1;
  CHECK(centre);
  // Taller: rows 32..63 of a 32x96 picture.
  const auto tall = pattern(32, 96);
  const auto rows = hunyuan15_fit_image(tall, 32, 32);
  CHECK(std::abs(at_px(rows, 5, 0, 1) - at_px(tall, 5, 32, 1)) <= 1);
  CHECK(std::abs(at_px(rows, 31, 31, 2) - at_px(tall, 31, 63, 2)) <= 1);
  // Scaled: 64x128 to cover 32x32 is 32x64 (the pipeline's floor division), then the middle 32 rows;
  // a square picture for a 48x32 job is scaled to 48x48 and cut to 48x32.
  const auto down = hunyuan15_fit_image(pattern(64, 128), 32, 32);
  CHECK((down.width == 32 && down.height == 32));
  const auto up = hunyuan15_fit_image(pattern(32, 32), 48, 32);
  CHECK((up.width == 48 && up.height == 32));
  check_invalid([] { hunyuan15_fit_image(RgbImage{}, 32, 32); }, "image");
}

TEST_CASE("an image-to-video package loads as the hunyuan15 family that requires an image" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load(*ref);
  auto* hy = dynamic_cast<Hunyuan15Family*>(family.get());
  REQUIRE(hy != nullptr);
  CHECK(hy->image_to_video());
  CHECK(family->package().family == "hunyuan-video-1.5");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}}); }, "image");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"image", "/no/such.png"}, {"last_image", "/no/such.png"}}); },
                "last_image");
  // A file that is not a picture is refused naming image when the job is prepared.
  const test::TempDir dir("vgen-hy15-i2v-");
  const auto bad = dir.path() / "bad.png";
  std::ofstream(bad) << "not a png";
  auto job = make_job(*family, case_json(ref->info["cases"]["nocfg"], 1, bad.string()));
  check_invalid([&] { family->prepare("cpu", {job.get()}); }, "image");
  CHECK_NOTHROW(family->warm_up("cpu"));
}

TEST_CASE("vgen's HunyuanVideo 1.5 I2V reproduces diffusers' HunyuanVideo15ImageToVideoPipeline, every step and the frames" *
          doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load(*ref);
  const auto seed = ref->info["seed"].get<std::uint64_t>();
  const auto image = ref->info["image"].get<std::string>();
  for (const std::string name : {"i2v", "nocfg"}) {
    CAPTURE(name);
    const auto& c = ref->info["cases"][name];
    auto job = make_job(*family, case_json(c, seed, image));
    const auto steps = test::run_group(*family, std::vector<std::shared_ptr<Hunyuan15Job>>{job})[0];
    REQUIRE(static_cast<int>(steps.size()) == c["num_inference_steps"].get<int>());
    const double worst = test::worst_step_diff(*ref, name, steps);
    const double frames = test::frames_diff(*ref, name, job->frames);
    MESSAGE(name << ": max |vgen - diffusers| over every step's latents = " << worst << ", over frames = " << frames);
    CHECK(worst <= 1e-4);
    CHECK(frames <= 1e-4);
  }
}

// Two jobs with different pictures, prompts, seeds and guidance in one transformer call; a second
// picture (the reference's upside down, another size: fitted) written beside the test.
struct TwoImages {
  test::TempDir dir{"vgen-hy15-i2v-"};
  std::string first, second;
  explicit TwoImages(Reference& ref) : first(ref.info["image"].get<std::string>()) {
    const auto img = decode_image_file(first, "image");
    second = (dir.path() / "second.png").string();
    std::ofstream(second, std::ios::binary) << test::png_image(img.width, img.height * 2, [&](int x, int y) {
      return img.rgb[static_cast<std::size_t>(img.height - 1 - y / 2) * img.width * 3 + x];
    });
  }
  std::vector<boost::json::object> specs(Reference& ref) const {
    const auto& c = ref.info["cases"]["i2v"];
    auto other = case_json(c, 77, second);
    other["prompt"] = "a blue square spinning";
    other["guidance"] = 3.0;
    return {case_json(c, 5, first), other};
  }
};

TEST_CASE("I2V jobs with different pictures batched in one call are each within 1e-4 of their solo run" * doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load(*ref);
  const TwoImages images(*ref);
  const auto specs = images.specs(*ref);
  std::vector<std::shared_ptr<Hunyuan15Job>> together;
  for (const auto& s : specs) together.push_back(make_job(*family, s));
  test::check_batched_matches_solo(*family, together, [&](std::size_t j) { return make_job(*family, specs[j]); });
  CHECK(test::max_diff(together[0]->image_condition, together[1]->image_condition) > 1e-3);  // each row its own picture
  CHECK(test::max_diff(together[0]->frames, together[1]->frames) > 1e-3);
}

TEST_CASE("an I2V job joining a running group at step 1 ends within 1e-4 of its solo run" * doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load(*ref);
  const TwoImages images(*ref);
  const auto specs = images.specs(*ref);
  auto make = [&](int i) { return make_job(*family, specs[static_cast<std::size_t>(i)]); };
  test::check_joined_equals_solo(family, make, 1, "hunyuan15 i2v");
}
