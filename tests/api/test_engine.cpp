// vgen::Runtime on the tiny random Wan package (written by the CTest fixture
// stages.wan_parity_reference): submit/wait, progress, the result cache (duplicates in flight
// and after the fact), validation before queueing, backpressure, cancellation, find.
#include "api/engine.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/errors.hpp"
#include "stages/media/image_input.hpp"
#include "stages/media/libav.hpp"
#include "stages/model/model_backend.hpp"
#include "tests/support/fake_family.hpp"
#include "tests/support/png.hpp"
#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <atomic>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <set>

#undef CHECK  // LibTorch's glog-style CHECK (via ATen in fake_family.hpp): use doctest's
#define CHECK DOCTEST_CHECK

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace vgen;

namespace {

// The tiny package, or empty after warning that the case is skipped (no tooling Python).
fs::path package_or_skip() {
  const char* dir = std::getenv("VGEN_WAN_PARITY_DIR");
  if (dir && *dir && fs::is_regular_file(fs::path(dir) / "pkg" / "manifest.json")) return fs::path(dir) / "pkg";
  WARN_MESSAGE(false, "VGEN_WAN_PARITY_DIR not set (no tooling Python): skipped");
  return {};
}

struct TempDir {
  fs::path path = test::temp_dir("vgen-engine-");
  ~TempDir() { fs::remove_all(path); }
};

RuntimeConfig small_config(const fs::path& model, const fs::path& out) {
  RuntimeConfig c;
  c.model = model;
  c.output_dir = out;
  c.retry_attempts = 1;
  c.batching.max_batch = 1;  // fixed, not "auto": no start-up probe, the same groups on every machine
  c.threads_per_device = 1;
  return c;
}

json::object spec(const std::string& prompt, const std::string& name, int seed = 1) {
  return {{"prompt", prompt}, {"name", name}, {"width", 32}, {"height", 32}, {"frames", 5}, {"steps", 2}, {"seed", seed}};
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("a submitted job renders, reports progress and ends once" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  Runtime rt(small_config(pkg, out.path));
  std::mutex m;
  std::vector<JobEvent> events;
  auto h = rt.submit(spec("a red circle moving left", "one"), {.on_progress = [&](const JobEvent& e) {
                       std::lock_guard lock(m);
                       events.push_back(e);
                     }});
  const auto r = h.wait();
  REQUIRE_MESSAGE(r.state == JobState::done, r.error);
  CHECK(r.output == out.path / "one.mp4");
  CHECK(fs::file_size(r.output) > 0);
  CHECK(r.content_type == "video/mp4");
  CHECK(r.device == "cpu:0");
  CHECK_FALSE(r.cache_hit);
  CHECK(r.spec.frames == 5);
  CHECK(h.finished());
  std::lock_guard lock(m);
  std::set<std::string> states;
  int steps = 0;
  for (const auto& e : events) {
    states.emplace(e.status());
    if (e.status() == "denoise" && e.total == 2) steps = std::max(steps, e.step);
  }
  CHECK(states.count("denoise"));
  CHECK(states.count("encode"));
  CHECK(events.back().state == JobState::done);
  CHECK(steps == 2);
  CHECK(rt.find(h.id()).has_value());
  const auto j = to_json(r);
  CHECK(j.at("status").as_string() == "done");
  CHECK(j.at("output").as_string() == r.output.string());
}

TEST_CASE("identical jobs are served from the result cache, in flight and afterwards" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  Runtime rt(small_config(pkg, out.path));
  // Three at once: one renders, the two identical ones wait for it and copy its output.
  auto a = rt.submit(spec("a blue square moving up", "a"));
  auto b = rt.submit(spec("a blue square moving up", "b"));
  auto other = rt.submit(spec("a blue square moving up", "other", /*seed=*/2));
  auto c = rt.submit(spec("a blue square moving up", "c"));
  const auto ra = a.wait(), rb = b.wait(), rc = c.wait(), ro = other.wait();
  for (const auto* r : {&ra, &rb, &rc, &ro}) REQUIRE_MESSAGE(r->state == JobState::done, r->error);
  CHECK_FALSE(ra.cache_hit);
  CHECK(rb.cache_hit);
  CHECK(rc.cache_hit);
  CHECK_FALSE(ro.cache_hit);  // another seed is another video
  CHECK(bytes_of(rb.output) == bytes_of(ra.output));
  CHECK(bytes_of(rc.output) == bytes_of(ra.output));
  CHECK(bytes_of(ro.output) != bytes_of(ra.output));
  CHECK(rb.output == out.path / "b.mp4");
  // Later: straight from the cache. A changed file is not trusted.
  auto d = rt.submit(spec("a blue square moving up", "d")).wait();
  CHECK(d.cache_hit);
  CHECK(rt.stats().result_cache_hits == 3);
  { std::ofstream(ra.output, std::ios::app) << "x"; }
  std::ofstream(out.path / "b.mp4", std::ios::app) << "x";
  std::ofstream(out.path / "c.mp4", std::ios::app) << "x";
  std::ofstream(out.path / "d.mp4", std::ios::app) << "x";
  auto e = rt.submit(spec("a blue square moving up", "e")).wait();
  CHECK_FALSE(e.cache_hit);
  CHECK(rt.stats().result_cache_hits == 3);
  CHECK(rt.metrics_text().find("vgen_cache_hits_total{cache=\"results\"}") != std::string::npos);
}

TEST_CASE("a bad spec is refused before it is queued; an unknown id is not found" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  Runtime rt(small_config(pkg, out.path));
  auto bad = spec("a red circle moving left", "x");
  bad["width"] = 250;
  try {
    rt.submit(bad);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("width") != std::string::npos);
  }
  auto escape = spec("a red circle moving left", "../x");
  CHECK_THROWS_AS(rt.submit(escape), Error);
  CHECK(rt.stats().submitted == 0);
  CHECK_FALSE(rt.find("job-404").has_value());
  CHECK_FALSE(rt.cancel("job-404"));
  CHECK(fs::is_empty(out.path));
}

TEST_CASE("a full queue refuses try_submit; cancelled and queued jobs still end" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto cfg = small_config(pkg, out.path);
  cfg.stages["preprocess"].queue = 1;
  cfg.stages["denoise"].queue = 1;
  cfg.stages["decode"].queue = 1;
  cfg.stages["encode"].queue = 1;
  Runtime rt(cfg);
  std::vector<JobHandle> accepted;
  int refused = 0;
  for (int i = 0; i < 40 && refused == 0; ++i) {
    auto s = spec("a green triangle moving down", "j" + std::to_string(i), i);
    s["steps"] = 20;
    try {
      accepted.push_back(rt.try_submit(s));
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::overloaded);
      ++refused;
    }
  }
  CHECK(refused == 1);  // queues of one fill up long before 40 jobs of 20 steps are through
  REQUIRE(!accepted.empty());
  CHECK(rt.stats().rejected == 1);
  // Cancel the last accepted one; every accepted job ends exactly once.
  CHECK(accepted.back().cancel());
  int done = 0, cancelled = 0;
  for (auto& h : accepted) {
    const auto r = h.wait();
    if (r.state == JobState::done) ++done;
    if (r.state == JobState::cancelled) ++cancelled;
  }
  CHECK(done + cancelled == static_cast<int>(accepted.size()));
  CHECK(cancelled >= 1);
  CHECK_FALSE(fs::exists(out.path / ("j" + std::to_string(accepted.size() - 1) + ".mp4")));
}

TEST_CASE("a missing model is named") {
  TempDir out;
  try {
    Runtime rt(small_config(out.path / "nope", out.path));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("nope") != std::string::npos);
  }
}

TEST_CASE("30% injected transient faults per stage: every one of 50 jobs completes" * doctest::timeout(600)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto cfg = small_config(pkg, out.path);
  cfg.retry_attempts = 12;  // 0.3^12: a job failing some stage 12 times in a row is ~5e-7
  cfg.retry_initial_backoff = std::chrono::milliseconds(1);
  cfg.retry_max_backoff = std::chrono::milliseconds(5);
  cfg.faults = parse_fault_plan(json::parse(R"({"seed": 7, "stages": {"*": {"transient_rate": 0.3}}})").as_object(), "faults");
  Runtime rt(cfg);
  std::vector<JobHandle> jobs;
  for (int i = 0; i < 50; ++i) jobs.push_back(rt.submit(spec("a red circle moving left", "j" + std::to_string(i), i)));
  int retries = 0;
  for (auto& h : jobs) {
    const auto r = h.wait();
    REQUIRE_MESSAGE(r.state == JobState::done, r.id << ": " << r.error);
    retries += r.retries;
  }
  CHECK(retries > 20);  // ~0.43 retries per job and stage: the faults really happened
}

TEST_CASE("a permanent fault fails only its job; out of memory retries with a smaller batch" * doctest::timeout(600)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto cfg = small_config(pkg, out.path);
  cfg.retry_attempts = 3;
  cfg.retry_initial_backoff = std::chrono::milliseconds(1);
  cfg.batching.max_batch = 4;
  cfg.batching.wait = std::chrono::seconds(10);
  cfg.faults = parse_fault_plan(
      json::parse(R"({"seed": 3, "oom_above_batch": 2, "stages": {"encode": {"permanent_rate": 0.3}}})").as_object(), "faults");
  const FaultInjector oracle(cfg.faults);
  Runtime rt(cfg);
  std::vector<JobHandle> jobs;
  // Ids chosen here, not generated: the injector's draws hash the id, so random ids made "some
  // but not all jobs fail" true only ~94 % of the time (0.7^8 that none is doomed).
  for (int i = 0; i < 8; ++i) {
    SubmitOptions o;
    o.id = "permanent-fault-k" + std::to_string(i);
    jobs.push_back(rt.submit(spec("a blue square moving up", "k" + std::to_string(i), i), o));
  }
  int failed = 0, oom_retried = 0;
  for (auto& h : jobs) {
    const auto r = h.wait();
    const bool doomed = oracle.draw(r.id, "encode", r.retries) < 0.3;
    if (doomed) {
      ++failed;
      CHECK(r.state == JobState::failed);
      CHECK(r.error.find("injected permanent fault in encode") != std::string::npos);
      CHECK_FALSE(fs::exists(out.path / (r.spec.name + ".mp4")));
    } else {
      CHECK_MESSAGE(r.state == JobState::done, r.id << ": " << r.error);
    }
    oom_retried += r.retries > 0;
  }
  CHECK(failed > 0);
  CHECK(failed < 8);
  CHECK(oom_retried >= 4);  // the first batch of four ran out of memory and was retried in twos
}

TEST_CASE("warmup loads and calls every module before the first job, which renders the same bytes" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  auto& modules = ModuleCache::instance();
  std::string cold;
  {
    TempDir out;
    modules.clear();
    const auto before = modules.loads();
    Runtime rt(small_config(pkg, out.path));
    CHECK(modules.loads() == before);  // without warmup the modules load with the first job
    const auto r = rt.submit(spec("a red circle moving left", "clip")).wait();
    REQUIRE_MESSAGE(r.state == JobState::done, r.error);
    CHECK(modules.loads() == before + 3);
    cold = bytes_of(r.output);
  }
  TempDir out;
  modules.clear();
  const auto before = modules.loads();
  auto c = small_config(pkg, out.path);
  c.warmup = true;
  Runtime rt(c);
  CHECK(modules.loads() == before + 3);  // text encoder, transformer, VAE decoder
  CHECK(rt.metrics_text().find("vgen_warmup_seconds{device=\"cpu:0\"}") != std::string::npos);
  const auto r = rt.submit(spec("a red circle moving left", "clip")).wait();
  REQUIRE_MESSAGE(r.state == JobState::done, r.error);
  CHECK(modules.loads() == before + 3);  // the job ran on the warmed modules
  CHECK(bytes_of(r.output) == cold);     // warm-up changes no job state
}

namespace {

// The tiny package's files under another family's name (so another model identity).
fs::path fake_package_dir(const fs::path& pkg, const fs::path& dir) {
  fs::copy(pkg, dir, fs::copy_options::recursive);
  std::ifstream in(dir / "manifest.json");
  auto manifest = json::parse(std::string(std::istreambuf_iterator<char>(in), {})).as_object();
  manifest["family"] = "fake-sum";
  std::ofstream(dir / "manifest.json", std::ios::trunc) << json::serialize(manifest);
  return dir;
}

std::shared_ptr<test::FakeFamily> last_fake;  // the fake family of the last Runtime made

void register_fake_family() {
  static std::once_flag once;
  std::call_once(once, [] {
    families().add("fake-sum", [](ModelPackage p, const FamilyOptions&) {
      auto f = std::make_shared<test::FakeFamily>(std::move(p), "fake-sum");
      f->expect_model = "fake";
      last_fake = f;
      return std::shared_ptr<Family>(f);
    });
  });
}

}  // namespace

TEST_CASE("two families at once: every job ends once, groups never mix, the fake's results are its own" *
          doctest::timeout(600)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  register_fake_family();
  TempDir out;
  const auto fake_dir = fake_package_dir(pkg, out.path / "fake-pkg");
  auto config = small_config(pkg, out.path / "mixed");
  config.models = {{"fake", fake_dir}};
  config.batching.max_batch = 4;
  config.batching.wait = std::chrono::milliseconds(200);
  // Groups form from step 0 only: a job that joins a running group is within 1e-4 of its solo
  // run (tests/stages: every family), not bit-identical, and this test compares MP4 bytes.
  config.batching.join_running = false;
  std::map<std::string, std::string> outputs;  // fake jobs' names -> bytes
  {
    Runtime rt(config);
    auto fake = last_fake;
    REQUIRE(fake);
    std::mutex m;
    std::map<std::string, int> ends;  // terminal events per job
    std::vector<JobHandle> handles;
    for (int i = 0; i < 20; ++i) {
      auto s = spec("job " + std::to_string(i), "j" + std::to_string(i), i);
      if (i % 2) s["model"] = "fake";
      SubmitOptions o;
      o.on_progress = [&m, &ends](const JobEvent& e) {
        if (e.state == JobState::done || e.state == JobState::failed || e.state == JobState::cancelled) {
          std::lock_guard l(m);
          ++ends[e.job_id];
        }
      };
      handles.push_back(rt.submit(s, o));
    }
    for (auto& h : handles) {
      const auto r = h.wait();
      CHECK(r.state == JobState::done);
      if (r.spec.model == "fake") outputs[r.spec.name] = bytes_of(r.output);
    }
    rt.drain();
    std::lock_guard l(m);
    CHECK(ends.size() == 20);
    for (const auto& [id, n] : ends) CHECK(n == 1);
    // Every fake job went through the fake family's calls at each of its 2 steps, and no
    // Wan job ever did: the families' groups never mixed.
    CHECK(fake->foreign_rows() == 0);
    for (int i = 1; i < 20; i += 2) CHECK(fake->predicted("j" + std::to_string(i)) == 2);
    CHECK(fake->max_rows_after(0) > 1);  // and the fake jobs did batch among themselves
  }
  // Each fake job alone (its own Runtime, no batching) writes the same bytes.
  auto alone = small_config(fake_dir, out.path / "alone");
  Runtime rt(alone);
  for (int i = 1; i < 20; i += 2) {
    const auto r = rt.submit(spec("job " + std::to_string(i), "j" + std::to_string(i), i)).wait();
    REQUIRE(r.state == JobState::done);
    CHECK(bytes_of(r.output) == outputs.at("j" + std::to_string(i)));
  }
}

// The two-families case above failed in CI now and then: the same fake job wrote different
// MP4 bytes in one Runtime and the next, with identical frames. libx264's AVX-512 kernels in a
// long-lived process (stages/media/x264_cpu.hpp); before vgen turned them off, this case failed
// in 4 of 9 runs on an AVX-512 machine, with 1 to 308 of the 600 outputs different.
TEST_CASE("one job rendered 600 times in one Runtime writes the same bytes every time" * doctest::timeout(600)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  register_fake_family();
  TempDir out;
  auto config = small_config(fake_package_dir(pkg, out.path / "fake-pkg"), out.path / "out");
  config.result_cache_entries = 0;  // render each one, do not serve the first from the cache
  Runtime rt(config);
  std::string first;
  int different = 0;
  for (int k = 0; k < 600; ++k) {
    const auto r = rt.submit(spec("job 11", "r" + std::to_string(k), 11)).wait();
    REQUIRE_MESSAGE(r.state == JobState::done, r.error);
    const auto bytes = bytes_of(r.output);
    if (k == 0) first = bytes;
    else different += bytes != first;
    fs::remove(r.output);
  }
  CHECK(different == 0);
}

TEST_CASE("a journal that cannot be opened fails the constructor cleanly, every time" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  std::ofstream(out.path / "garbage.db") << std::string(8192, 'g');
  fs::create_directories(out.path / "dir.db");
  // The store used to open after the pipeline's workers had started, which then ran on a
  // freed pipeline: SIGSEGV in 30-80 % of runs. Several runs, so a race would show.
  for (int i = 0; i < 6; ++i) {
    auto c = small_config(pkg, out.path / "o");
    c.journal = out.path / (i % 2 ? "garbage.db" : "dir.db");
    try {
      Runtime rt(c);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(c.journal.string()) != std::string::npos);
    }
  }
}

TEST_CASE("ids are UUIDv7, unique across Runtimes on one journal; a finished job's error kind survives a restart" *
          doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto c = small_config(pkg, out.path);
  c.journal = out.path / "j.db";
  std::string first, failed;
  {
    Runtime rt(c);
    first = rt.submit(spec("a red circle", "one")).id();
    CHECK(first.size() == 36);
    CHECK(first[14] == '7');
    // A job that fails with a kind other than internal: a deadline that has passed.
    SubmitOptions o;
    o.deadline = std::chrono::milliseconds(0);
    auto h = rt.submit(spec("a blue square", "late", 7), o);
    failed = h.id();
    const auto r = h.wait();
    REQUIRE(r.error_kind);
    CHECK(*r.error_kind == ErrorKind::deadline_exceeded);
    rt.drain();
  }
  Runtime rt(c);
  const auto second = rt.submit(spec("a red circle", "two")).id();
  CHECK(second != first);
  CHECK(second > first);  // time-ordered
  const auto again = rt.find(failed);
  REQUIRE(again);
  const auto r = again->result();
  REQUIRE(r.error_kind);
  CHECK(*r.error_kind == ErrorKind::deadline_exceeded);  // came back as cancelled before
  // A client's id that a finished job already holds is refused.
  SubmitOptions o;
  o.id = first;
  CHECK_THROWS_AS(rt.submit(spec("x", "x"), o), Error);
  try {
    rt.submit(spec("x", "x"), o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::already_exists);
  }
  rt.drain();
}

// ---- image input (wt-img): a family that takes an image gets the admitted spec ----

namespace {

std::string png_of_size(int w, int h) {
  return test::png_image(w, h, [](int x, int y) { return static_cast<std::uint8_t>(x + y); });
}

struct SeenImage {
  std::mutex mutex;
  std::vector<std::pair<RgbImage, std::string>> images;  // decoded by the family, with the spec's hash
};
std::shared_ptr<SeenImage> seen_images = std::make_shared<SeenImage>();

void register_fake_i2v_family() {
  static std::once_flag once;
  std::call_once(once, [] {
    families().add("fake-i2v", [](ModelPackage p, const FamilyOptions&) {
      auto f = std::make_shared<test::FakeFamily>(std::move(p), "fake-i2v");
      f->on_create_job = [](const JobSpec& spec) {
        auto img = decode_image_file(spec.image, "image");  // what an image-to-video family does first
        std::lock_guard lock(seen_images->mutex);
        seen_images->images.emplace_back(std::move(img), spec.image_sha256);
      };
      return std::shared_ptr<Family>(f);
    });
  });
}

}  // namespace

TEST_CASE("image jobs: refused by name before queueing; the family gets the admitted image" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  register_fake_i2v_family();
  TempDir out;
  const auto dir = out.path / "i2v-pkg";
  fake_package_dir(pkg, dir);
  {
    std::ifstream in(dir / "manifest.json");
    auto manifest = json::parse(std::string(std::istreambuf_iterator<char>(in), {})).as_object();
    manifest["family"] = "fake-i2v";
    manifest["inputs"] = {{"image", "required"}};
    std::ofstream(dir / "manifest.json", std::ios::trunc) << json::serialize(manifest);
  }
  const auto picture = png_of_size(40, 24);
  std::ofstream(out.path / "in.png", std::ios::binary) << picture;
  std::ofstream(out.path / "bad.png", std::ios::binary) << picture.substr(0, picture.size() / 2);
  auto config = small_config(pkg, out.path / "videos");
  config.models = {{"i2v", dir}};
  Runtime rt(config);

  auto refused = [&](json::object s) {
    try {
      rt.submit(s);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto i2v = spec("a cat", "cat");
  i2v["model"] = "i2v";
  CHECK(refused(i2v) == "image: required by model 'i2v'");
  i2v["image"] = (out.path / "bad.png").string();
  CHECK(refused(i2v).starts_with("image: cannot decode the png data"));
  auto t2v = spec("a cat", "t2v");
  t2v["image"] = (out.path / "in.png").string();
  const auto t2v_error = refused(t2v);
  CHECK(t2v_error.starts_with("image: model '"));
  CHECK(t2v_error.ends_with("' does not take an image"));
  CHECK((!fs::exists(out.path / "videos") || fs::is_empty(out.path / "videos")));  // nothing written for refused jobs
  CHECK(rt.stats().submitted == 0);

  i2v["image"] = (out.path / "in.png").string();
  const auto r = rt.submit(i2v).wait();
  REQUIRE_MESSAGE(r.state == JobState::done, r.error);
  CHECK(r.spec.image == (out.path / "in.png").string());
  CHECK(r.spec.image_sha256 == image_sha256(picture));
  std::lock_guard lock(seen_images->mutex);
  REQUIRE(seen_images->images.size() >= 1);
  const auto& [img, hash] = seen_images->images.back();
  CHECK(img.width == 40);
  CHECK(img.height == 24);
  CHECK(img.rgb[3 * 5 + 1] == 5 * 3 + 1);  // pixel (5, 0), green: the bytes the test wrote
  CHECK(hash == image_sha256(picture));
}

TEST_CASE("previews reach the progress callback and JobHandle::preview when preview_every is set; list_jobs is newest first" *
          doctest::timeout(300)) {
  const auto bundled = fs::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes";
  if (!fs::exists(bundled / "manifest.json")) return;
  const json::object quick{{"prompt", "a red circle moving left"}, {"width", 128}, {"height", 128}, {"frames", 8}, {"steps", 4}};
  TempDir out;
  auto config = small_config(bundled, out.path);
  config.preview_every = 2;
  Runtime rt(config);
  CHECK(rt.previews());
  std::mutex m;
  std::vector<std::shared_ptr<const JobPreview>> previews;
  auto h = rt.submit(quick, {.on_progress = [&](const JobEvent& e) {
                       std::lock_guard lock(m);
                       if (auto p = preview_of(e)) previews.push_back(p);
                     }});
  REQUIRE(h.wait().state == JobState::done);
  {
    std::lock_guard lock(m);
    REQUIRE(previews.size() == 2);
    CHECK(previews[0]->step == 2);
    CHECK(previews[1]->step == 4);
    CHECK(previews[1]->total == 4);
    CHECK(previews[1]->content_type == "image/png");
    CHECK(previews[1]->bytes.substr(1, 3) == "PNG");
    CHECK(h.preview() == previews[1]);  // the latest stays with the job
  }
  auto other = quick;
  other["seed"] = 9;
  auto second = rt.submit(other);
  second.wait();
  const auto page = rt.list_jobs({});
  REQUIRE(page.jobs.size() == 2);
  CHECK(page.jobs[0].id == second.id());
  CHECK(page.jobs[1].id == h.id());
  CHECK(rt.list_jobs({.status = "done", .limit = 1}).next != 0);

  TempDir off_dir;
  Runtime off(small_config(bundled, off_dir.path));  // unset: the library makes none
  CHECK_FALSE(off.previews());
  std::atomic<bool> any{false};
  auto quiet = off.submit(quick, {.on_progress = [&](const JobEvent& e) {
                            if (preview_of(e)) any = true;
                          }});
  REQUIRE(quiet.wait().state == JobState::done);
  CHECK_FALSE(any);
  CHECK_FALSE(quiet.preview());
}

// Issue 35 item 4: a job that differs from a finished one only in interpolate/upscale takes
// its kept base render (stages/exec/base_frames.hpp) and runs no denoising step; a cancelled or
// failed base keeps nothing, and an evicted one is rendered again.
TEST_CASE("a kept base render is reused when only the post-stage settings differ" * doctest::timeout(600)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  register_fake_family();
  TempDir out;
  const auto fake_dir = fake_package_dir(pkg, out.path / "fake-pkg");
  auto config = small_config(fake_dir, out.path / "warm");
  // One 32x32, 5-frame clip is 15,360 bytes: the budget holds one base, so a second evicts it.
  config.base_frames.max_bytes = 20'000;
  auto post = [](json::object s, int interpolate, int upscale) {
    if (interpolate > 1) s["interpolate"] = interpolate;
    if (upscale > 1) s["upscale"] = upscale;
    return s;
  };
  std::string warm_bytes;
  {
    Runtime rt(config);
    auto fake = last_fake;
    REQUIRE(fake);
    auto a = rt.submit(post(spec("job 3", "a", 3), 1, 2)).wait();
    REQUIRE_MESSAGE(a.state == JobState::done, a.error);
    CHECK(fake->predicted("a") == 2);  // the base render: 2 steps
    auto b = rt.submit(post(spec("job 3", "b", 3), 2, 2)).wait();
    REQUIRE_MESSAGE(b.state == JobState::done, b.error);
    CHECK_FALSE(b.cache_hit);                 // not the result cache: another video
    CHECK(fake->predicted("b") == 0);         // no denoising step
    warm_bytes = bytes_of(b.output);
    auto plain = rt.submit(spec("job 3", "plain", 3)).wait();  // and the job without post-stages
    REQUIRE_MESSAGE(plain.state == JobState::done, plain.error);
    CHECK(fake->predicted("plain") == 0);
    CHECK(rt.metrics_text().find("vgen_base_reused_total 2") != std::string::npos);

    // A base cancelled mid-denoise keeps nothing: the next job of its key renders.
    std::promise<void> in_denoise, cancelled;
    auto resume = cancelled.get_future().share();
    std::atomic<bool> armed{true};
    fake->on_predict = [&](std::size_t, std::size_t) {
      if (!armed.exchange(false)) return;
      in_denoise.set_value();
      resume.wait();
    };
    auto h = rt.submit(post(spec("job 5", "c", 5), 1, 2));
    in_denoise.get_future().wait();
    h.cancel();
    cancelled.set_value();
    CHECK(h.wait().state == JobState::cancelled);
    fake->on_predict = nullptr;
    auto d = rt.submit(post(spec("job 5", "d", 5), 2, 1)).wait();
    REQUIRE_MESSAGE(d.state == JobState::done, d.error);
    CHECK(fake->predicted("d") == 2);

    // A failed base keeps nothing either.
    fake->oom_device = "cpu:0";
    auto e = rt.submit(spec("job 6", "e", 6)).wait();
    CHECK(e.state == JobState::failed);
    fake->oom_device.clear();
    auto f = rt.submit(post(spec("job 6", "f", 6), 1, 2)).wait();
    REQUIRE_MESSAGE(f.state == JobState::done, f.error);
    CHECK(fake->predicted("f") == 2);

    // The budget holds one clip: seed 5's base (d) evicted seed 3's, so seed 3 renders again.
    auto g = rt.submit(post(spec("job 3", "g", 3), 4, 1)).wait();
    REQUIRE_MESSAGE(g.state == JobState::done, g.error);
    CHECK(fake->predicted("g") == 2);
    CHECK(rt.metrics_text().find("vgen_cache_evictions_total{cache=\"base_frames\"}") != std::string::npos);
  }
  // The cold render of b (no cache of any kind) writes the same bytes: a hit's clip is the
  // decoded frames in bytes, exactly what the post-stages read on the cold path.
  auto cold = small_config(fake_dir, out.path / "cold");
  cold.result_cache_entries = 0;  // and so no kept base renders either
  Runtime rt(cold);
  auto fake = last_fake;
  const auto b = rt.submit(post(spec("job 3", "b", 3), 2, 2)).wait();
  REQUIRE_MESSAGE(b.state == JobState::done, b.error);
  CHECK(fake->predicted("b") == 2);
  CHECK(bytes_of(b.output) == warm_bytes);
}
