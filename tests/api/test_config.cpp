// Config files: the shipped configs load; unknown keys and bad values are rejected with the
// key's path; flags-over-file is the caller's assignment after load_config.
#include "api/config.hpp"
#include "runtime/errors.hpp"
#include "runtime/priority_channel.hpp"  // kDefaultAging
#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace vgen;

namespace {

fs::path write(const fs::path& dir, const std::string& text) {
  const auto p = dir / "c.json";
  std::ofstream(p) << text;
  return p;
}

std::string error_of(const fs::path& file) {
  try {
    load_config(file);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  FAIL("no error for " << file);
  return {};
}

}  // namespace

TEST_CASE("the shipped configs load and say what they should") {
  const fs::path src = VGEN_TEST_SOURCE_DIR;
  const auto cpu = load_config(src / "configs/cpu.json");
  CHECK(cpu.devices == "cpu");
  CHECK(cpu.model.empty());  // null: the bundled model
  CHECK(cpu.batching.max_batch == RuntimeConfig::kAuto);
  CHECK(cpu.threads_per_device == RuntimeConfig::kAuto);
  const auto gpu = load_config(src / "configs/multi-gpu.json");
  CHECK(gpu.devices == "cuda:0,cuda:1,cuda:2,cuda:3");
  CHECK(gpu.stages.at("denoise").workers == 4);
  const auto svc = load_config(src / "configs/service.json");
  CHECK(svc.service.listen == "127.0.0.1:8080");
  CHECK(svc.service.max_body_bytes == 65536);
  CHECK(svc.stages.at("preprocess").queue == 32);
}

TEST_CASE("configs/cpu.json and the built-in defaults agree (one source of truth)") {
  const fs::path src = VGEN_TEST_SOURCE_DIR;
  const auto file = to_json(load_config(src / "configs/cpu.json"));
  const auto built_in = to_json(RuntimeConfig{});
  for (const auto& [key, value] : built_in) {
    CAPTURE(std::string(key));
    CHECK(boost::json::serialize(file.at(key)) == boost::json::serialize(value));
  }
  CHECK(file.size() == built_in.size());
  CHECK(built_in.at("batching").at("max_batch") == boost::json::value("auto"));
  CHECK(built_in.at("threads").at("per_device") == boost::json::value("auto"));
  CHECK(built_in.at("threads").at("intra_op") == boost::json::value("auto"));
}

TEST_CASE("max_batch, threads.per_device and threads.intra_op take \"auto\" or a number") {
  const auto dir = test::temp_dir("vgen-config-");
  auto c = load_config(write(dir, R"({"batching": {"max_batch": "auto"}, "threads": {"per_device": "auto", "intra_op": "auto"},
                                     "tune": {"budget_s": 5, "dir": "tune", "max_batch": 16}})"));
  CHECK(c.batching.max_batch == RuntimeConfig::kAuto);
  CHECK(c.threads_per_device == RuntimeConfig::kAuto);
  CHECK(c.intra_op_threads == RuntimeConfig::kAuto);
  CHECK(c.tune.budget_s == 5);
  CHECK(c.tune.dir == dir / "tune");
  CHECK(c.tune.max_batch == 16);
  c = load_config(write(dir, R"({"batching": {"max_batch": 3}, "threads": {"per_device": 2, "intra_op": 1}})"));
  CHECK(c.batching.max_batch == 3);
  CHECK(c.threads_per_device == 2);
  CHECK(c.intra_op_threads == 1);
  // Round trip: to_json writes "auto" back.
  CHECK(to_json(RuntimeConfig{}).at("batching").at("max_batch") == boost::json::value("auto"));
  CHECK(to_json(c).at("batching").at("max_batch") == boost::json::value(3));
  CHECK(error_of(write(dir, R"({"batching": {"max_batch": "many"}})")).find("batching.max_batch: must be \"auto\" or an integer") !=
        std::string::npos);
  CHECK(error_of(write(dir, R"({"threads": {"per_device": 0}})")).find("threads.per_device: must be between 1 and 64") != std::string::npos);
  // threads.per_gpu: leases (compute threads) per GPU; a number, 1 by default.
  CHECK(RuntimeConfig{}.threads_per_gpu == 1);
  CHECK(load_config(write(dir, R"({"threads": {"per_gpu": 2}})")).threads_per_gpu == 2);
  CHECK(to_json(load_config(write(dir, R"({"threads": {"per_gpu": 3}})"))).at("threads").at("per_gpu") == boost::json::value(3));
  CHECK(error_of(write(dir, R"({"threads": {"per_gpu": 0}})")).find("threads.per_gpu: must be between 1 and 8") != std::string::npos);
  CHECK(error_of(write(dir, R"({"threads": {"per_gpu": 9}})")).find("threads.per_gpu: must be between 1 and 8") != std::string::npos);
  CHECK(error_of(write(dir, R"({"threads": {"per_gpu": "auto"}})")).find("threads.per_gpu") != std::string::npos);
  CHECK(error_of(write(dir, R"({"tune": {"budget": 1}})")).find("tune.budget: unknown key") != std::string::npos);
}

TEST_CASE("every key is read, with comments and relative paths") {
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({
    // a comment
    "model": "pkg", "devices": "cpu,cpu", "device_policy": "round_robin", "output_dir": "/tmp/x",
    "threads": {"io": 2, "per_device": 3, "codec": 4, "spin_us": 0},
    "stages": {"preprocess": {"workers": 2, "queue": 9}, "denoise": {"workers": 5}},
    "cache": {"text": {"entries": 7, "ttl_s": 8}, "results": {"entries": 0, "ttl_s": 10}, "base_frames": {"mb": 3, "ttl_s": 11}},
    "retry": {"attempts": 1, "initial_backoff_ms": 0, "max_backoff_ms": 0, "multiplier": 1},
    "encoder": {"crf": 30, "preset": "ultrafast", "threads": 2},
    "job_ttl_s": 60, "batching": {"max_batch": 8, "wait_ms": 5}, "warmup": true,
    "images": {"max_bytes": 1000, "max_pixels": 4096},
    "videos": {"max_bytes": 5000, "max_frames": 81, "max_pixels": 8192, "max_seconds": 12.5},
    "service": {"listen": "0.0.0.0:9000", "max_body_bytes": 1024, "token": "t", "max_connections": 3}
  })"));
  CHECK(c.model == dir / "pkg");
  CHECK(c.devices == "cpu,cpu");
  CHECK(c.device_policy == "round_robin");
  CHECK(c.output_dir == "/tmp/x");
  CHECK(c.io_threads == 2);
  CHECK(c.threads_per_device == 3);
  CHECK(c.codec_threads == 4);
  CHECK(c.spin_us == 0);
  CHECK(c.stages.at("preprocess").workers == 2);
  CHECK(c.stages.at("preprocess").queue == 9);
  CHECK(c.stages.at("denoise").workers == 5);
  CHECK(c.stages.at("denoise").queue == RuntimeConfig{}.stages.at("denoise").queue);  // absent keys keep their defaults
  CHECK(c.text_cache.entries == 7);
  CHECK(c.text_cache.ttl == std::chrono::seconds(8));
  CHECK(c.result_cache_entries == 0);
  CHECK(c.base_frames.max_bytes == std::size_t{3} << 20);
  CHECK(c.base_frames.ttl == std::chrono::seconds(11));
  CHECK(c.retry_attempts == 1);
  CHECK(c.encoder.crf == 30);
  CHECK(c.encoder.preset == "ultrafast");
  CHECK(c.job_ttl == std::chrono::seconds(60));
  CHECK(c.batching.max_batch == 8);
  CHECK(c.batching.wait == std::chrono::milliseconds(5));
  CHECK(c.warmup);
  CHECK_FALSE(RuntimeConfig{}.warmup);
  CHECK(c.service.listen == "0.0.0.0:9000");
  CHECK(c.service.token == "t");
  CHECK(c.service.max_connections == 3);
  CHECK(c.images.max_bytes == 1000);
  CHECK(c.images.max_pixels == 4096);
  CHECK(RuntimeConfig{}.images.max_bytes == 32u << 20);
  CHECK(c.videos.max_bytes == 5000);
  CHECK(c.videos.max_frames == 81);
  CHECK(c.videos.max_pixels == 8192);
  CHECK(c.videos.max_seconds == 12.5);
  CHECK(RuntimeConfig{}.videos.max_frames == 1025);
  // The JSON form round-trips through apply_config.
  auto j = to_json(c);
  j["service"].as_object()["token"] = "t";
  const auto again = apply_config(RuntimeConfig{}, j, "again", "/");
  CHECK(again.stages.at("denoise").workers == 5);
  CHECK(again.warmup);
  CHECK(again.model == c.model);
  CHECK(again.images.max_pixels == 4096);
  CHECK(again.videos.max_frames == 81);
  CHECK(again.videos.max_seconds == 12.5);
  fs::remove_all(dir);
}

TEST_CASE("preview_every: unset by default, read, round-tripped and bounded") {
  CHECK_FALSE(RuntimeConfig{}.preview_every);  // each app chooses: serve previews, batch and render do not
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({"preview_every": 3})"));
  REQUIRE(c.preview_every);
  CHECK(*c.preview_every == 3);
  auto round_trip = [](const RuntimeConfig& from) {
    auto j = to_json(from);
    j.erase("model");  // unset here: the JSON form names it only when set
    return apply_config(RuntimeConfig{}, j, "again", "/");
  };
  CHECK(*round_trip(c).preview_every == 3);
  CHECK_FALSE(round_trip(RuntimeConfig{}).preview_every);
  CHECK(*load_config(write(dir, R"({"preview_every": 0})")).preview_every == 0);  // off, said so
  CHECK(error_of(write(dir, R"({"preview_every": -1})")).find("preview_every: must be between 0 and 100000") != std::string::npos);
  CHECK(error_of(write(dir, R"({"preview_every": "often"})")).find("preview_every: must be an integer") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("checkpoints: defaults, read, round-tripped and bounded") {
  const RuntimeConfig d;
  CHECK(d.checkpoints.every_steps == 0);
  CHECK(d.checkpoints.every_seconds == 30);
  CHECK(d.checkpoints.min_steps == 10);
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({"checkpoints": {"every_steps": 4, "every_seconds": 0, "min_steps": 2, "max_mb": 5, "dir": "ck"}})"));
  CHECK(c.checkpoints.every_steps == 4);
  CHECK(c.checkpoints.every_seconds == 0);
  CHECK(c.checkpoints.min_steps == 2);
  CHECK(c.checkpoints.max_bytes == 5u << 20);
  CHECK(c.checkpoints.dir == dir / "ck");  // relative to the config file
  auto j = to_json(c);
  j.erase("model");
  const auto again = apply_config(RuntimeConfig{}, j, "again", "/");
  CHECK(again.checkpoints.every_steps == 4);
  CHECK(again.checkpoints.max_bytes == 5u << 20);
  CHECK(again.checkpoints.dir == dir / "ck");
  CHECK(error_of(write(dir, R"({"checkpoints": {"every_steps": -1}})")).find("checkpoints.every_steps") != std::string::npos);
  CHECK(error_of(write(dir, R"({"checkpoints": {"often": 1}})")).find("checkpoints.often") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("batching.join_running: on by default, read, round-tripped, a boolean") {
  CHECK(RuntimeConfig{}.batching.join_running);
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({"batching": {"max_batch": 4, "join_running": false}})"));
  CHECK_FALSE(c.batching.join_running);
  CHECK(c.batching.max_batch == 4);
  auto j = to_json(c);
  j.erase("model");
  CHECK_FALSE(apply_config(RuntimeConfig{}, j, "again", "/").batching.join_running);
  CHECK(load_config(write(dir, R"({"batching": {"join_running": true}})")).batching.join_running);
  CHECK(error_of(write(dir, R"({"batching": {"join_running": "no"}})")).find("batching.join_running: must be true or false") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("encoder.keyframe_interval_s: the encoder's default, read, round-tripped and bounded") {
  CHECK(RuntimeConfig{}.encoder.keyframe_interval_s == EncodeOptions{}.keyframe_interval_s);
  CHECK(to_json(RuntimeConfig{}).at("encoder").at("keyframe_interval_s") == boost::json::value(2.0));
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({"encoder": {"keyframe_interval_s": 0.5}})"));
  CHECK(c.encoder.keyframe_interval_s == 0.5);
  CHECK(c.encoder.crf == EncodeOptions{}.crf);  // the rest of the encoder's options keep their defaults
  auto j = to_json(c);
  j.erase("model");
  CHECK(apply_config(RuntimeConfig{}, j, "again", "/").encoder.keyframe_interval_s == 0.5);
  CHECK(error_of(write(dir, R"({"encoder": {"keyframe_interval_s": 0}})")).find("encoder.keyframe_interval_s: must be between") !=
        std::string::npos);
  CHECK(error_of(write(dir, R"({"encoder": {"keyframe_interval_s": "1s"}})")).find("encoder.keyframe_interval_s: must be a number") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("live.max_total_mb: 2 GiB by default, read, round-tripped and bounded") {
  CHECK(RuntimeConfig{}.live_max_total_bytes == std::size_t{2048} << 20);
  CHECK(to_json(RuntimeConfig{}).at("live").at("max_total_mb") == boost::json::value(2048));
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({"live": {"max_total_mb": 64}})"));
  CHECK(c.live_max_total_bytes == std::size_t{64} << 20);
  auto j = to_json(c);
  j.erase("model");
  CHECK(apply_config(RuntimeConfig{}, j, "again", "/").live_max_total_bytes == std::size_t{64} << 20);
  CHECK(error_of(write(dir, R"({"live": {"max_total_mb": 0}})")).find("live.max_total_mb") != std::string::npos);
  CHECK(error_of(write(dir, R"({"live": {"max_mb": 1}})")).find("live.max_mb") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("priority_aging_ms: the priority queues' default, read, round-tripped and bounded") {
  CHECK(RuntimeConfig{}.priority_aging == kDefaultAging);
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({"priority_aging_ms": 250})"));
  CHECK(c.priority_aging == std::chrono::milliseconds(250));
  auto j = to_json(c);
  j.erase("model");
  CHECK(apply_config(RuntimeConfig{}, j, "again", "/").priority_aging == std::chrono::milliseconds(250));
  CHECK(error_of(write(dir, R"({"priority_aging_ms": 0})")).find("priority_aging_ms: must be between 1 and 86400000") != std::string::npos);
  CHECK(error_of(write(dir, R"({"priority_aging_ms": "slow"})")).find("priority_aging_ms: must be an integer") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("unknown keys and bad values name the key path") {
  const auto dir = test::temp_dir("vgen-config-");
  struct Case {
    const char* json;
    const char* expect;
  } cases[] = {
      {R"({"stages": {"denoise": {"workers": 0}}})", "stages.denoise.workers: must be between 1 and 256 (got 0)"},
      {R"({"stages": {"denoize": {}}})", "stages.denoize: unknown key"},
      {R"({"cache": {"text": {"ttl_s": "long"}}})", "cache.text.ttl_s: must be an integer"},
      {R"({"retry": {"multiplier": 0.5}})", "retry.multiplier: must be between"},
      {R"({"retry": {"initial_backoff_ms": 500, "max_backoff_ms": 100}})", "retry.max_backoff_ms: must be >= initial_backoff_ms"},
      {R"({"device_policy": "random"})", "device_policy: must be one of least_loaded, round_robin"},
      {R"({"service": {"listen": "localhost"}})", "service.listen: must be HOST:PORT"},
      {R"({"devices": ""})", "devices: must not be empty"},
      {R"({"threads": 4})", "threads: must be an object"},
      {R"({"threads": {"spin_us": -1}})", "threads.spin_us: must be"},
      {R"({"encoder": {"crf": 2.5}})", "encoder.crf: must be an integer"},
      // Found by tests/fuzz (fuzz_config): huge integral doubles were converted to int64
      // before the range check, which is undefined behaviour (UBSan float-cast-overflow).
      {R"({"stages": {"preprocess": {"queue": 1e30032}}})", "stages.preprocess.queue: must be between 1 and 1000000"},
      {R"({"encoder": {"crf": -1e300}})", "encoder.crf: must be between 0 and 63 (got -1E300)"},
      {R"({"threads": {"io": 64.0}, "job_ttl_s": 9.3e18})", "job_ttl_s: must be between 1 and 31536000"},
      {R"({"warmup": 1})", "warmup: must be true or false (got 1)"},
      {R"({"colour": 1})", "colour: unknown key"},
      {R"({"images": {"max_bytes": 0}})", "images.max_bytes: must be between 1 and"},
      {R"({"images": {"max_width": 10}})", "images.max_width: unknown key"},
      {R"({"videos": {"max_frames": 0}})", "videos.max_frames: must be between 1 and"},
      {R"({"videos": {"codec": "h264"}})", "videos.codec: unknown key"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"model": )", "not valid JSON"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.json);
    const auto msg = error_of(write(dir, c.json));
    CHECK_MESSAGE(msg.find(c.expect) != std::string::npos, msg);
    CHECK(msg.find("c.json") != std::string::npos);  // the file is named
  }
  CHECK(error_of(dir / "missing.json").find("cannot be read") != std::string::npos);
  fs::remove_all(dir);
}

namespace {

// Sets (nullptr: unsets) an environment variable for one scope and restores the old value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value) ::setenv(name.c_str(), value, 1);
    else ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("read_environment: OMP_NUM_THREADS fills an \"auto\" threads.intra_op, $VGEN_FAULTS replaces the plan") {
  ScopedEnv no_faults("VGEN_FAULTS", nullptr);
  {
    ScopedEnv omp("OMP_NUM_THREADS", "3");
    RuntimeConfig c;
    read_environment(c);
    CHECK(c.intra_op_threads == 3);  // then the tuner keeps it fixed
    CHECK_FALSE(c.faults.enabled());
    c.intra_op_threads = 2;
    read_environment(c);
    CHECK(c.intra_op_threads == 2);  // a number the config or a flag gave stays
    // The reader itself reads no environment: a file says what it says.
    const fs::path src = VGEN_TEST_SOURCE_DIR;
    CHECK(load_config(src / "configs/cpu.json").intra_op_threads == RuntimeConfig::kAuto);
  }
  for (const char* bad : {"", "0", "-2", "two", "4x", "2000"}) {
    CAPTURE(bad);
    ScopedEnv omp("OMP_NUM_THREADS", bad);
    RuntimeConfig c;
    read_environment(c);
    CHECK(c.intra_op_threads == RuntimeConfig::kAuto);  // as LibTorch: ignored
  }
  ScopedEnv no_omp("OMP_NUM_THREADS", nullptr);
  {
    ScopedEnv faults("VGEN_FAULTS", R"({"seed": 3, "stages": {"*": {"transient_rate": 0.5}}})");
    RuntimeConfig c;
    read_environment(c);
    CHECK(c.faults.enabled());
    CHECK(c.faults.seed == 3);
    CHECK(c.intra_op_threads == RuntimeConfig::kAuto);
  }
  for (const char* bad : {"[1]", "{", R"({"colour": 1})"}) {
    CAPTURE(bad);
    ScopedEnv faults("VGEN_FAULTS", bad);
    RuntimeConfig c;
    try {
      read_environment(c);
      FAIL("no error for " << bad);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find("VGEN_FAULTS") != std::string::npos);
    }
  }
}

TEST_CASE("stages: a map keyed by the model set's stage names, in pipeline order in JSON") {
  const RuntimeConfig d;
  std::vector<std::string> names;
  for (const auto& [name, s] : d.stages) names.push_back(name);
  CHECK(names == std::vector<std::string>{"decode", "denoise", "encode", "interpolate", "preprocess", "upscale"});
  CHECK(d.stages.at("preprocess").queue == 64);
  std::vector<std::string> in_json;
  const auto j = to_json(d);
  for (const auto& kv : j.at("stages").as_object()) in_json.emplace_back(kv.key());
  CHECK(in_json == std::vector<std::string>{"preprocess", "denoise", "decode", "interpolate", "upscale", "encode"});
  const auto dir = test::temp_dir("vgen-config-");
  const auto msg = error_of(write(dir, R"({"stages": {"lookup": {"workers": 2}}})"));
  CHECK_MESSAGE(msg.find("stages.lookup: unknown key (known: decode, denoise, encode, interpolate, preprocess, upscale)") != std::string::npos, msg);
  fs::remove_all(dir);
}

TEST_CASE("VGEN_MODEL points at the default model, and a wrong one is an error") {
  const auto dir = test::temp_dir("vgen-model-");
  setenv("VGEN_MODEL", dir.c_str(), 1);
  CHECK_THROWS_AS(default_model_dir(), Error);
  std::ofstream(dir / "manifest.json") << "{}";
  CHECK(default_model_dir() == dir);
  unsetenv("VGEN_MODEL");
  fs::remove_all(dir);
}

TEST_CASE("post: the post-stages' limit, variants, model and tiles; round-trips through JSON") {
  const auto dir = test::temp_dir("vgen-config-");
  const auto c = load_config(write(dir, R"({"post": {"max_side": 2048, "interpolator": "minterpolate", "upscaler": "realesrgan",
                                               "upscale_model": "/models/x4", "tile": 128, "tile_overlap": 24, "threads": 2},
                                      "stages": {"upscale": {"workers": 2, "queue": 8}}})"));
  CHECK(c.post.max_side == 2048);
  CHECK(c.post.upscaler == "realesrgan");
  CHECK(c.post.upscale_model == "/models/x4");
  CHECK(c.post.tile == 128);
  CHECK(c.post.tile_overlap == 24);
  CHECK(c.post_threads == 2);
  CHECK(c.stages.at("upscale").workers == 2);
  auto j = to_json(c);
  j.erase("model");
  const auto again = apply_config(RuntimeConfig{}, j, "again", "/");
  CHECK(again.post.max_side == 2048);
  CHECK(again.post.upscale_model == "/models/x4");
  auto d = to_json(RuntimeConfig{});  // the default upscaler (none named) round-trips as null
  d.erase("model");
  CHECK(d.at("post").at("upscaler").is_null());
  CHECK(apply_config(RuntimeConfig{}, d, "again", "/").post.upscaler.empty());
  CHECK(d.at("post").at("interpolator").is_null());  // and so does the default interpolator
  CHECK(d.at("post").at("interpolate_model").is_null());
  CHECK(apply_config(RuntimeConfig{}, d, "again", "/").post.interpolator.empty());
  const auto r = load_config(write(dir, R"({"post": {"interpolate_model": "/models/rife", "interpolate_batch": 8}})"));
  CHECK(r.post.interpolate_model == "/models/rife");
  CHECK(r.post.interpolate_batch == 8);
  auto rj = to_json(r);
  rj.erase("model");
  CHECK(apply_config(RuntimeConfig{}, rj, "again", "/").post.interpolate_model == "/models/rife");
  CHECK(error_of(write(dir, R"({"post": {"interpolate_batch": 0}})")).find("post.interpolate_batch: must be between 1 and 256") != std::string::npos);
  CHECK(RuntimeConfig{}.post.max_side == 4096);
  CHECK(error_of(write(dir, R"({"post": {"max_side": 8}})")).find("post.max_side: must be between 16 and 16384") != std::string::npos);
  CHECK(error_of(write(dir, R"({"post": {"scale": 2}})")).find("post.scale: unknown key") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("batching.max_decode_batch and model_backend.torchscript_gpu_fusion: read, round-tripped, checked") {
  const auto dir = test::temp_dir("vgen-config-");
  CHECK(RuntimeConfig{}.batching.max_decode_batch == RuntimeConfig::kAuto);
  CHECK_FALSE(RuntimeConfig{}.model_backend.torchscript_gpu_fusion.has_value());
  const auto c = load_config(write(dir, R"({"batching": {"max_decode_batch": 2}, "model_backend": {"torchscript_gpu_fusion": true}})"));
  CHECK(c.batching.max_decode_batch == 2);
  CHECK(c.model_backend.torchscript_gpu_fusion == std::optional<bool>(true));
  auto j = to_json(c);
  j.erase("model");
  const auto again = apply_config(RuntimeConfig{}, j, "again", "/");
  CHECK(again.batching.max_decode_batch == 2);
  CHECK(again.model_backend.torchscript_gpu_fusion == std::optional<bool>(true));
  auto unset = to_json(RuntimeConfig{});
  CHECK(unset.at("model_backend").at("torchscript_gpu_fusion") == "auto");
  CHECK(unset.at("batching").at("max_decode_batch") == "auto");
  CHECK_FALSE(load_config(write(dir, R"({"model_backend": {"torchscript_gpu_fusion": "auto"}})")).model_backend.torchscript_gpu_fusion);
  CHECK(load_config(write(dir, R"({"model_backend": {"torchscript_gpu_fusion": false}})")).model_backend.torchscript_gpu_fusion ==
        std::optional<bool>(false));
  CHECK(error_of(write(dir, R"({"model_backend": {"torchscript_gpu_fusion": "yes"}})")).find("model_backend.torchscript_gpu_fusion") !=
        std::string::npos);
  CHECK(error_of(write(dir, R"({"model_backend": {"torchscript_gpu_fusion": 1}})")).find("must be true, false or \"auto\"") !=
        std::string::npos);
  CHECK(error_of(write(dir, R"({"model_backend": {"fusion": true}})")).find("model_backend.fusion") != std::string::npos);
  CHECK(error_of(write(dir, R"({"batching": {"max_decode_batch": 0}})")).find("batching.max_decode_batch") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("model_backend.attention: auto by default, a list of known backends read and round-tripped, bad ones named") {
  const auto dir = test::temp_dir("vgen-config-");
  CHECK(RuntimeConfig{}.model_backend.attention.empty());
  CHECK(to_json(RuntimeConfig{}).at("model_backend").at("attention") == "auto");
  const auto c = load_config(write(dir, R"({"model_backend": {"attention": ["cudnn", "flash"]}})"));
  CHECK(c.model_backend.attention == std::vector<std::string>{"cudnn", "flash"});
  auto j = to_json(c);
  CHECK(j.at("model_backend").at("attention") == boost::json::parse(R"(["cudnn", "flash"])"));
  j.erase("model");
  CHECK(apply_config(RuntimeConfig{}, j, "again", "/").model_backend.attention == std::vector<std::string>{"cudnn", "flash"});
  CHECK(load_config(write(dir, R"({"model_backend": {"attention": "auto"}})")).model_backend.attention.empty());
  CHECK(error_of(write(dir, R"({"model_backend": {"attention": ["cudnn", "sage"]}})"))
            .find("model_backend: model_backend.attention: unknown attention backend 'sage' (known: flash, efficient, math, cudnn)") !=
        std::string::npos);
  CHECK(error_of(write(dir, R"({"model_backend": {"attention": ["math", "math"]}})")).find("'math' is listed twice") != std::string::npos);
  CHECK(error_of(write(dir, R"({"model_backend": {"attention": "cudnn"}})"))
            .find("model_backend.attention: must be a list of names or \"auto\" (got \"cudnn\")") != std::string::npos);
  CHECK(error_of(write(dir, R"({"model_backend": {"attention": ["cudnn", 3]}})")).find("model_backend.attention[1]: must be a string") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("model_backend.cuda_graphs: off by default, true/false read and round-tripped, \"auto\" is off, bad values named") {
  const auto dir = test::temp_dir("vgen-config-");
  CHECK_FALSE(RuntimeConfig{}.model_backend.cuda_graphs);
  CHECK(to_json(RuntimeConfig{}).at("model_backend").at("cuda_graphs") == false);
  const auto c = load_config(write(dir, R"({"model_backend": {"cuda_graphs": true}})"));
  CHECK(c.model_backend.cuda_graphs);
  auto j = to_json(c);
  CHECK(j.at("model_backend").at("cuda_graphs") == true);
  j.erase("model");
  CHECK(apply_config(RuntimeConfig{}, j, "again", "/").model_backend.cuda_graphs);
  CHECK_FALSE(load_config(write(dir, R"({"model_backend": {"cuda_graphs": false}})")).model_backend.cuda_graphs);
  CHECK_FALSE(load_config(write(dir, R"({"model_backend": {"cuda_graphs": "auto"}})")).model_backend.cuda_graphs);
  // A later layer turns it off again.
  CHECK_FALSE(apply_config(c, boost::json::parse(R"({"model_backend": {"cuda_graphs": false}})").as_object(), "layer", "/")
                  .model_backend.cuda_graphs);
  CHECK(error_of(write(dir, R"({"model_backend": {"cuda_graphs": "yes"}})"))
            .find("model_backend.cuda_graphs: must be true, false or \"auto\" (got \"yes\")") != std::string::npos);
  CHECK(error_of(write(dir, R"({"model_backend": {"cuda_graphs": 1}})")).find("model_backend.cuda_graphs") != std::string::npos);
  CHECK(error_of(write(dir, R"({"model_backend": {"cuda_graph": true}})")).find("model_backend.cuda_graph") != std::string::npos);
}

TEST_CASE("model_backend.torchscript_gpu_optimize: auto by default, read, round-tripped, checked against fusion") {
  const auto dir = test::temp_dir("vgen-config-");
  CHECK_FALSE(RuntimeConfig{}.model_backend.torchscript_gpu_optimize.has_value());
  CHECK(to_json(RuntimeConfig{}).at("model_backend").at("torchscript_gpu_optimize") == "auto");
  const auto c = load_config(write(dir, R"({"model_backend": {"torchscript_gpu_optimize": false}})"));
  CHECK(c.model_backend.torchscript_gpu_optimize == std::optional<bool>(false));
  CHECK_FALSE(c.model_backend.torchscript_gpu_fusion.has_value());
  auto j = to_json(c);
  CHECK(j.at("model_backend").at("torchscript_gpu_optimize") == false);
  j.erase("model");
  CHECK(apply_config(RuntimeConfig{}, j, "again", "/").model_backend.torchscript_gpu_optimize == std::optional<bool>(false));
  CHECK(load_config(write(dir, R"({"model_backend": {"torchscript_gpu_optimize": true, "torchscript_gpu_fusion": true}})"))
            .model_backend.torchscript_gpu_optimize == std::optional<bool>(true));
  CHECK_FALSE(load_config(write(dir, R"({"model_backend": {"torchscript_gpu_optimize": "auto"}})")).model_backend.torchscript_gpu_optimize);
  CHECK(load_config(write(dir, R"({"model_backend": {"torchscript_gpu_optimize": false, "torchscript_gpu_fusion": false}})"))
            .model_backend.torchscript_gpu_optimize == std::optional<bool>(false));
  CHECK(error_of(write(dir, R"({"model_backend": {"torchscript_gpu_optimize": "off"}})"))
            .find("model_backend.torchscript_gpu_optimize: must be true, false or \"auto\" (got \"off\")") != std::string::npos);
  // Fusion runs in the optimiser: the pair is refused naming both fields, in a file ...
  const auto both = error_of(write(dir, R"({"model_backend": {"torchscript_gpu_optimize": false, "torchscript_gpu_fusion": true}})"));
  CHECK(both.find("model_backend.torchscript_gpu_optimize false") != std::string::npos);
  CHECK(both.find("model_backend.torchscript_gpu_fusion true") != std::string::npos);
  // ... and when a later layer (here applied over a config with fusion on) makes the pair.
  RuntimeConfig fused;
  fused.model_backend.torchscript_gpu_fusion = true;
  try {
    apply_config(fused, boost::json::parse(R"({"model_backend": {"torchscript_gpu_optimize": false}})").as_object(), "layer", "/");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("model_backend.torchscript_gpu_fusion true") != std::string::npos);
  }
  fs::remove_all(dir);
}
