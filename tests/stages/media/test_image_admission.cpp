// Admission of a job's images: decoded before acceptance, the spec gains the bytes' hashes,
// a resumed job whose file changed is refused.
#include "stages/media/image_admission.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "stages/media/libav.hpp"
#include "tests/support/png.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/json.hpp>

#include <cstring>
#include <fstream>

using namespace vgen;
namespace json = boost::json;

namespace {

std::string png(int w, int h, std::uint8_t shade) { return test::solid_png(w, h, shade); }

void write(const std::filesystem::path& file, const std::string& bytes) { std::ofstream(file, std::ios::binary) << bytes; }

SpecLimits flf2v() {
  SpecLimits l;
  l.image = InputUse::required;
  l.last_image = InputUse::optional;
  l.model_name = "i2v";
  return l;
}

std::string admission_error(json::value j, const ImageLimits& limits = {}) {
  try {
    auto spec = parse_job_spec(j, JobSpec{}, flf2v());
    admit_images(j, spec, limits);
    return "";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
}

}  // namespace

TEST_CASE("admission hashes the bytes into the spec: same picture, same hash, whatever the path") {
  test::TempDir dir;
  const auto a = png(16, 8, 10);
  write(dir / "a.png", a);
  write(dir / "copy.png", a);
  write(dir / "b.png", png(16, 8, 200));
  json::value j = {{"prompt", "p"}, {"image", (dir / "a.png").string()}, {"last_image", (dir / "b.png").string()}};
  auto spec = parse_job_spec(j, JobSpec{}, flf2v());
  admit_images(j, spec);
  CHECK(spec.image_sha256 == image_sha256(a));
  CHECK(j.at("image_sha256").as_string() == spec.image_sha256);
  CHECK(j.at("last_image_sha256").as_string() == spec.last_image_sha256);
  CHECK(spec.last_image_sha256 != spec.image_sha256);

  // The completed JSON parses to the same spec (what the pipeline and the journal carry).
  const auto again = parse_job_spec(j, JobSpec{}, flf2v());
  CHECK(again.image_sha256 == spec.image_sha256);
  json::value other = {{"prompt", "p"}, {"image", (dir / "copy.png").string()}, {"last_image", (dir / "b.png").string()}};
  auto other_spec = parse_job_spec(other, JobSpec{}, flf2v());
  admit_images(other, other_spec);
  CHECK(job_content_key("m", other_spec) == job_content_key("m", spec));

  // A job without images is left as it is.
  json::value t2v = {{"prompt", "p"}};
  SpecLimits none;
  auto t2v_spec = parse_job_spec(t2v, JobSpec{}, none);
  admit_images(t2v, t2v_spec);
  CHECK(t2v.as_object().size() == 1);
}

TEST_CASE("admission refuses, naming the field: missing, undecodable, truncated, too large, changed since accepted") {
  test::TempDir dir;
  const auto good = png(16, 8, 10);
  write(dir / "good.png", good);
  write(dir / "text.png", "not an image at all");
  write(dir / "cut.png", good.substr(0, good.size() / 2));
  write(dir / "empty.png", "");
  const auto image = [&](const std::string& name) { return (dir / name).string(); };

  CHECK(admission_error(json::value{{"prompt", "p"}, {"image", image("missing.png")}}).starts_with("image: cannot read"));
  CHECK(admission_error(json::value{{"prompt", "p"}, {"image", image("text.png")}}).starts_with("image: not a PNG"));
  CHECK(admission_error(json::value{{"prompt", "p"}, {"image", image("cut.png")}}).starts_with("image: "));
  CHECK(admission_error(json::value{{"prompt", "p"}, {"image", image("empty.png")}}) == "image: empty (0 bytes)");
  CHECK(admission_error(json::value{{"prompt", "p"}, {"image", image("good.png")}, {"last_image", image("text.png")}})
            .starts_with("last_image: not a PNG"));
  CHECK(admission_error(json::value{{"prompt", "p"}, {"image", image("good.png")}}, ImageLimits{.max_pixels = 100})
            .find("larger than the limit") != std::string::npos);
  CHECK(admission_error(json::value{{"prompt", "p"}, {"image", image("good.png")}}).empty());

  // Resumed with a hash: the file must still hold those bytes.
  json::value resumed = {{"prompt", "p"}, {"image", image("good.png")}, {"image_sha256", image_sha256(good)}};
  CHECK(admission_error(resumed).empty());
  write(dir / "good.png", png(16, 8, 99));
  CHECK(admission_error(resumed).find("no longer holds the image") != std::string::npos);
}
