#include "stages/model/model_package.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <tuple>

#include "runtime/errors.hpp"

using namespace vgen;
namespace fs = std::filesystem;
namespace json = boost::json;

using vgen::test::TempDir;
using vgen::test::listing;

namespace {


void write_file(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary);
  out << bytes;
  REQUIRE(out.good());
}

// The component entry for `file` as it is on disk (loading checks size and sha256; the bytes
// are not TorchScript: nothing here loads them).
json::object component_entry(const fs::path& file, const std::string& name, const char* format) {
  return {{"file", name}, {"sha256", sha256_file(file)}, {"bytes", fs::file_size(file)}, {"format", format}};
}

// A small valid package in `dir` (the layout of models/vgen-shapes; docs/MODEL_PACKAGE.md),
// its manifest changed by `edit` before it is written.
void write_package(const fs::path& dir, const std::function<void(json::object&)>& edit = {}) {
  fs::create_directories(dir);
  json::object components;
  for (const auto& [name, file, format] : {std::tuple{"tokenizer", "tokenizer.model", "sentencepiece"},
                                           std::tuple{"text_encoder", "text_encoder.pt", "torchscript"},
                                           std::tuple{"transformer", "transformer.pt", "torchscript"},
                                           std::tuple{"vae_decoder", "vae_decoder.pt", "torchscript"}}) {
    if (!fs::exists(dir / file)) write_file(dir / file, std::string("bytes of ") + name);
    components[name] = component_entry(dir / file, file, format);
  }
  auto manifest = json::parse(R"({
    "format": "vgen-model-package", "format_version": 1, "family": "wan2.1-t2v", "dtype": "float32",
    "tokenizer": {"max_length": 16, "pad_id": 0, "eos_id": 1, "add_eos": true},
    "text_encoder": {"output_dim": 64, "output_masked": true},
    "scheduler": {"type": "FlowMatchEulerDiscreteScheduler", "config": {"num_train_timesteps": 1000, "shift": 2.0}},
    "latent": {"channels": 3, "temporal_scale": 1, "spatial_scale": 8,
               "latents_mean": [0.0, 0.0, 0.0], "latents_std": [1.0, 1.0, 1.0]},
    "resolution": {"height": {"multiple_of": 32, "min": 128, "max": 512},
                   "width": {"multiple_of": 32, "min": 128, "max": 512}},
    "frames": {"rule": "any", "k_multiple": 1, "min": 8, "max": 32},
    "defaults": {"steps": 16, "guidance_scale": 2.0, "height": 256, "width": 256, "frames": 16, "fps": 8,
                 "negative_prompt": ""}
  })").as_object();
  manifest["components"] = std::move(components);
  if (edit) edit(manifest);
  write_file(dir / "manifest.json", json::serialize(manifest));
}

// Sets the value at a dotted path ("frames.k_multiple") of the manifest.
std::function<void(json::object&)> set(const std::string& path, json::value value) {
  return [path, value](json::object& m) {
    json::object* o = &m;
    std::size_t start = 0;
    for (auto dot = path.find('.'); dot != std::string::npos; start = dot + 1, dot = path.find('.', start))
      o = &(*o)[path.substr(start, dot - start)].as_object();
    (*o)[path.substr(start)] = value;
  };
}

// The message of the invalid_argument error loading `dir` raises ("" if it loads).
std::string load_error(const fs::path& dir) {
  try {
    load_model_package(dir);
    return "";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
}

// The error of a package whose manifest is the valid one with `path` set to `value`.
std::string error_with(const std::string& path, json::value value) {
  TempDir tmp;
  write_package(tmp.path() / "pkg", set(path, std::move(value)));
  return load_error(tmp.path() / "pkg");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a valid package loads with its limits and defaults") {
  TempDir tmp;
  write_package(tmp.path() / "pkg");
  const auto p = load_model_package(tmp.path() / "pkg");
  CHECK(p.max_length == 16);
  CHECK(p.spatial_scale == 8);
  CHECK(p.temporal_scale == 1);
  CHECK(p.limits.size_multiple == 32);
  CHECK(p.limits.frames_step == 1);
  CHECK(p.limits.min_frames == 8);
  CHECK(p.limits.max_frames == 32);
  CHECK(p.defaults.steps == 16);
  CHECK(p.defaults.fps == 8.0);
  CHECK(p.component("transformer").file == fs::canonical(tmp.path() / "pkg" / "transformer.pt"));
  // The whole manifest is kept, so a family reads its own sections without reading the file again.
  CHECK(p.manifest.at("family").as_string() == p.family);
  CHECK(p.manifest.contains("components"));
}

TEST_CASE("the bundled model package loads") {
  const auto dir = fs::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes";
  if (!fs::exists(dir / "manifest.json")) return;  // a checkout without the model
  const auto p = load_model_package(dir, {.verify_limit = 0});
  CHECK(p.limits.size_multiple == 32);
  CHECK(p.defaults.frames == 16);
  CHECK(p.defaults.step_cache == doctest::Approx(0.1));  // suggested: bench/results/step_cache_eval_vgen_shapes.json
  CHECK(p.preview_weight.size() == 9);  // fitted by tools/vgen_export/latent_preview.py
  // bf16 is its default on the CPU (docs/PERFORMANCE.md, "bf16 on CPU: the bundled model"):
  // float32 weights with a bf16 denoiser variant (vgen_demo_model.variants --bf16 --default bfloat16)
  CHECK(p.dtype == "float32");
  CHECK(p.defaults.precision == "bfloat16");
  CHECK(p.limits.precisions == std::vector<std::string>{"float32", "bfloat16"});
  CHECK(p.component_for("transformer", "bfloat16") == "transformer_bf16");
  CHECK(p.component("transformer_bf16").dtype == "bfloat16");
}

TEST_CASE("preview factors are read when present and named when malformed; without them previews are off") {
  TempDir tmp;
  write_package(tmp.path() / "none");
  const auto none = load_model_package(tmp.path() / "none");
  CHECK(none.preview_weight.empty());
  CHECK(none.preview_bias.empty());
  write_package(tmp.path() / "pkg", set("preview", json::parse(R"({"latent_rgb": {
      "weight": [[0.5, 0, 0], [0, 0.25, 0], [0, 0, 0.125]], "bias": [0.5, 0.4, 0.3], "fit": {"rmse": 0.01}}})")));
  const auto p = load_model_package(tmp.path() / "pkg");
  REQUIRE(p.preview_weight.size() == 9);
  CHECK(p.preview_weight[0] == 0.5);
  CHECK(p.preview_weight[4] == 0.25);
  CHECK(p.preview_weight[8] == 0.125);
  CHECK(p.preview_bias == std::vector<double>{0.5, 0.4, 0.3});
  CHECK(contains(error_with("preview", json::parse(R"({"latent_rgb": {"weight": [[1, 0], [0, 1], [0, 0]], "bias": [0, 0, 0]}})")),
                 "preview.latent_rgb.weight must be 3 rows of latent.channels (3)"));
  CHECK(contains(error_with("preview", json::parse(R"({"latent_rgb": {"weight": [[1, 0, 0], [0, 1, 0]], "bias": [0, 0, 0]}})")),
                 "preview.latent_rgb.weight"));
  CHECK(contains(error_with("preview", json::parse(R"({"latent_rgb": {"weight": [[1, 0, 0], [0, 1, 0], [0, 0, "x"]], "bias": [0, 0, 0]}})")),
                 "preview.latent_rgb.weight"));
  CHECK(contains(error_with("preview", json::parse(R"({"latent_rgb": {"weight": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "bias": [0, 0]}})")),
                 "preview.latent_rgb.bias must hold 3 numbers"));
  CHECK(contains(error_with("preview", json::parse(R"({"latent_rgb": {"weight": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}})")),
                 "manifest lacks preview.latent_rgb.bias"));
  CHECK(contains(error_with("preview", json::parse(R"({"other": 1})")), "latent_rgb"));
}

TEST_CASE("a zero divisor is refused at load, naming the field and its range") {
  // Each of these used to load and divide by zero (SIGFPE) in the first job or the warm-up.
  for (const char* field : {"frames.k_multiple", "resolution.height.multiple_of", "resolution.width.multiple_of",
                            "latent.spatial_scale", "latent.temporal_scale"}) {
    CAPTURE(field);
    const auto message = error_with(field, 0);
    CHECK(contains(message, std::string("manifest field '") + field + "' must be an integer in [1, "));
    CHECK(contains(message, "(got 0)"));
    CHECK(contains(error_with(field, -4), std::string("manifest field '") + field + "'"));
  }
}

TEST_CASE("tokenizer.max_length is bounded instead of allocating 2^31 tokens per prompt") {
  CHECK(contains(error_with("tokenizer.max_length", 2147483647),
                 "manifest field 'tokenizer.max_length' must be an integer in [2, 65536] (got 2147483647)"));
  CHECK(contains(error_with("tokenizer.max_length", 1), "tokenizer.max_length"));
  CHECK(error_with("tokenizer.max_length", 65536) == "");
  CHECK(contains(error_with("tokenizer.eos_id", -1), "tokenizer.eos_id"));
}

TEST_CASE("every other integer of the manifest is bounded before it is narrowed to int") {
  // 2^32 + 16 used to be cast to int (16) and accepted.
  CHECK(contains(error_with("frames.max", std::int64_t{4294967312}), "manifest field 'frames.max' must be an integer in [1, "));
  CHECK(contains(error_with("resolution.width.max", std::int64_t{4294967808}), "resolution.width.max"));
  CHECK(contains(error_with("latent.channels", 0), "latent.channels"));
  CHECK(contains(error_with("latent.channels", 1000000000), "latent.channels"));
  CHECK(contains(error_with("defaults.steps", 0), "defaults.steps"));
  CHECK(contains(error_with("defaults.frames", std::int64_t{1} << 40), "defaults.frames"));
  CHECK(contains(error_with("frames.k_multiple", 1.5), "frames.k_multiple"));
  CHECK(contains(error_with("frames.k_multiple", "4"), "frames.k_multiple"));
  CHECK(contains(error_with("resolution.height.min", json::value(18446744073709551615ull)), "resolution.height.min"));
}

TEST_CASE("limits that allow nothing, or disagree with the latent layout, are refused") {
  CHECK(contains(error_with("resolution.height.multiple_of", 20), "multiple_of must equal"));
  TempDir tmp;
  write_package(tmp.path() / "a", [](json::object& m) {
    set("resolution.height.multiple_of", 12)(m);
    set("resolution.width.multiple_of", 12)(m);
  });
  CHECK(contains(load_error(tmp.path() / "a"), "must be a multiple of latent.spatial_scale (8)"));
  CHECK(contains(error_with("latent.temporal_scale", 4), "frames.k_multiple (1) must be a multiple of latent.temporal_scale (4)"));
  CHECK(contains(error_with("resolution.height.min", 600), "resolution allows no size"));
  write_package(tmp.path() / "b", [](json::object& m) {
    set("resolution.height.min", 130)(m);
    set("resolution.width.max", 150)(m);  // no multiple of 32 in [130, 150]
  });
  CHECK(contains(load_error(tmp.path() / "b"), "resolution allows no size"));
  write_package(tmp.path() / "c", [](json::object& m) {
    set("frames.k_multiple", 8)(m);
    set("frames.min", 10)(m);
    set("frames.max", 16)(m);  // 8k+1 in [10, 16]: none
  });
  CHECK(contains(load_error(tmp.path() / "c"), "frames allows no count"));
  CHECK(contains(error_with("latent.latents_std", json::array{1.0, 0.0, 1.0}), "latents_std must be positive"));
  CHECK(contains(error_with("dtype", "float64"), "manifest field 'dtype'"));
}

TEST_CASE("defaults outside the package's own limits are refused at load") {
  CHECK(contains(error_with("defaults.fps", 1e-9), "manifest defaults: fps:"));
  CHECK(contains(error_with("defaults.frames", 33), "manifest defaults: frames:"));
  CHECK(contains(error_with("defaults.width", 100), "manifest defaults: width:"));
  CHECK(contains(error_with("defaults.guidance_scale", 1e300), "manifest defaults: guidance:"));
}

TEST_CASE("defaults.shift: the package's suggested flow shift, optional (0: the scheduler config's), checked") {
  {
    TempDir tmp;
    write_package(tmp.path() / "pkg");
    CHECK(load_model_package(tmp.path() / "pkg").defaults.shift == 0.0);
  }
  TempDir tmp;
  write_package(tmp.path() / "pkg", set("defaults.shift", 5.0));
  CHECK(load_model_package(tmp.path() / "pkg").defaults.shift == 5.0);
  CHECK(contains(error_with("defaults.shift", -1.0), "manifest defaults: shift:"));
  CHECK(contains(error_with("defaults.shift", "x"), "defaults.shift"));
}

TEST_CASE("a component file must lie inside the package, compared by path components") {
  TempDir tmp;
  // The evil sibling: "<tmp>/pkg-evil/..." starts with the string "<tmp>/pkg".
  fs::create_directories(tmp.path() / "pkg-evil");
  write_file(tmp.path() / "pkg-evil" / "transformer.pt", "evil weights");
  write_package(tmp.path() / "pkg", [&](json::object& m) {
    m["components"].as_object()["transformer"] =
        component_entry(tmp.path() / "pkg-evil" / "transformer.pt", "../pkg-evil/transformer.pt", "torchscript");
  });
  CHECK(contains(load_error(tmp.path() / "pkg"), "components.transformer.file '../pkg-evil/transformer.pt' escapes the package"));

  // An absolute path, and a path that leaves and comes back in (allowed: it is inside).
  write_package(tmp.path() / "abs", [&](json::object& m) {
    m["components"].as_object()["transformer"] = component_entry(
        tmp.path() / "pkg-evil" / "transformer.pt", (tmp.path() / "pkg-evil" / "transformer.pt").string(), "torchscript");
  });
  CHECK(contains(load_error(tmp.path() / "abs"), "escapes the package"));
  write_package(tmp.path() / "back", set("components.transformer.file", "../back/transformer.pt"));
  CHECK(load_error(tmp.path() / "back") == "");
  write_package(tmp.path() / "self", set("components.transformer.file", "."));
  CHECK(contains(load_error(tmp.path() / "self"), "escapes the package"));
}

TEST_CASE("a symlink that leaves the package is refused; one that stays inside loads") {
  TempDir tmp;
  write_file(tmp.path() / "outside.pt", "weights from elsewhere");
  fs::create_directories(tmp.path() / "pkg");
  fs::create_symlink(tmp.path() / "outside.pt", tmp.path() / "pkg" / "transformer.pt");
  write_package(tmp.path() / "pkg");  // the entry's sha256 and size are those of the link's target
  CHECK(contains(load_error(tmp.path() / "pkg"), "components.transformer.file 'transformer.pt' escapes the package"));

  // A symlinked directory inside the package that points out of it.
  fs::create_directories(tmp.path() / "elsewhere");
  write_file(tmp.path() / "elsewhere" / "vae_decoder.pt", "decoder");
  fs::create_directories(tmp.path() / "pkg2");
  fs::create_directory_symlink(tmp.path() / "elsewhere", tmp.path() / "pkg2" / "parts");
  write_package(tmp.path() / "pkg2", [&](json::object& m) {
    m["components"].as_object()["vae_decoder"] =
        component_entry(tmp.path() / "elsewhere" / "vae_decoder.pt", "parts/vae_decoder.pt", "torchscript");
  });
  CHECK(contains(load_error(tmp.path() / "pkg2"), "escapes the package"));

  // Inside links are fine, and so is a package reached through a symlink of its own.
  fs::create_directories(tmp.path() / "pkg3" / "blobs");
  write_file(tmp.path() / "pkg3" / "blobs" / "t", "transformer weights");
  fs::create_symlink("blobs/t", tmp.path() / "pkg3" / "transformer.pt");
  write_package(tmp.path() / "pkg3");
  CHECK(load_error(tmp.path() / "pkg3") == "");
  fs::create_directory_symlink(tmp.path() / "pkg3", tmp.path() / "current");
  const auto p = load_model_package(tmp.path() / "current");
  CHECK(p.component("transformer").file == fs::canonical(tmp.path() / "pkg3" / "blobs" / "t"));  // what is loaded
}

TEST_CASE("inputs: what images and video a package takes, none when absent; bad values are refused by name") {
  TempDir tmp;
  write_package(tmp.path() / "t2v");
  const auto t2v = load_model_package(tmp.path() / "t2v");
  CHECK(t2v.limits.image == InputUse::none);
  CHECK(t2v.limits.last_image == InputUse::none);
  CHECK(t2v.limits.model_name == "t2v");
  write_package(tmp.path() / "i2v", [](json::object& m) { m["inputs"] = {{"image", "required"}, {"last_image", "optional"}}; });
  const auto i2v = load_model_package(tmp.path() / "i2v/");
  CHECK(i2v.limits.image == InputUse::required);
  CHECK(i2v.limits.last_image == InputUse::optional);
  CHECK(i2v.limits.model_name == "i2v");
  CHECK(contains(error_with("inputs", "required"), "'inputs' must be an object"));
  CHECK(contains(error_with("inputs", json::object{{"image", "sometimes"}}), "inputs.image: must be none, optional or required"));
  CHECK(contains(error_with("inputs", json::object{{"image", 1}}), "inputs.image' must be a string"));
  CHECK(contains(error_with("inputs", json::object{{"audio", "required"}}), "inputs.audio' is unknown"));
  CHECK(contains(error_with("inputs", json::object{{"video", "often"}}), "inputs.video: must be none, optional or required"));
  CHECK(t2v.limits.video == InputUse::none);
  write_package(tmp.path() / "v2v", [](json::object& m) { m["inputs"] = {{"video", "optional"}}; });
  CHECK(load_model_package(tmp.path() / "v2v").limits.video == InputUse::optional);
  write_package(tmp.path() / "v2v-only", [](json::object& m) { m["inputs"] = {{"video", "required"}}; });
  CHECK(load_model_package(tmp.path() / "v2v-only").limits.video == InputUse::required);  // its defaults validate with a video
  CHECK(contains(error_with("inputs", json::object{{"image", "optional"}, {"last_image", "required"}}), "cannot be required"));
  CHECK(contains(error_with("inputs", json::object{{"last_image", "optional"}}), "needs inputs.image"));
  // Wan VACE: the mask video and reference images.
  write_package(tmp.path() / "vace", [](json::object& m) {
    m["inputs"] = {{"video", "optional"}, {"mask_video", "optional"}, {"reference_images", "required"}};
  });
  const auto vace = load_model_package(tmp.path() / "vace");  // its defaults validate with a reference image
  CHECK(vace.limits.mask_video == InputUse::optional);
  CHECK(vace.limits.reference_images == InputUse::required);
  CHECK(t2v.limits.mask_video == InputUse::none);
  CHECK(t2v.limits.reference_images == InputUse::none);
  CHECK(contains(error_with("inputs", json::object{{"mask_video", "optional"}}), "inputs.mask_video needs inputs.video"));
  CHECK(contains(error_with("inputs", json::object{{"reference_images", "some"}}), "inputs.reference_images: must be none, optional or required"));
}

TEST_CASE("precisions: the base one from the transformer, variants mapped onto listed components, a checked default") {
  TempDir tmp;
  write_package(tmp.path() / "f32");
  const auto f32 = load_model_package(tmp.path() / "f32");
  CHECK(f32.base_precision == "float32");
  CHECK(f32.limits.precisions == std::vector<std::string>{"float32"});
  CHECK(f32.defaults.precision == "float32");
  CHECK(f32.component_for("transformer", "int8") == "transformer");

  // int8-only (today's --quantize int8-only): the transformer itself is quantized.
  write_package(tmp.path() / "only", set("components.transformer.quantization", "int8-dynamic"));
  const auto only = load_model_package(tmp.path() / "only");
  CHECK(only.limits.precisions == std::vector<std::string>{"int8"});
  CHECK(only.defaults.precision == "int8");
  CHECK(contains(error_with("components.transformer.quantization", "int4"), "quantization' must be \"int8-dynamic\" or \"fp8-e4m3\""));
  write_package(tmp.path() / "fp8only", set("components.transformer.quantization", "fp8-e4m3"));
  const auto fp8_only = load_model_package(tmp.path() / "fp8only");
  CHECK(fp8_only.limits.precisions == std::vector<std::string>{"fp8"});
  CHECK(fp8_only.defaults.precision == "fp8");

  // Both: transformer_int8 beside the float transformer, chosen per job.
  auto with_variant = [&](const fs::path& dir, const char* precisions) {
    fs::create_directories(dir);
    write_file(dir / "transformer_int8.pt", "int8 bytes");
    write_package(dir, [&](json::object& m) {
      m["components"].as_object()["transformer_int8"] = component_entry(dir / "transformer_int8.pt", "transformer_int8.pt", "torchscript");
      m["precisions"] = json::parse(precisions);
    });
    return load_error(dir);
  };
  REQUIRE(with_variant(tmp.path() / "both", R"({"variants": {"int8": {"transformer": "transformer_int8"}}})") == "");
  const auto both = load_model_package(tmp.path() / "both");
  CHECK(both.limits.precisions == std::vector<std::string>{"float32", "int8"});
  CHECK(both.defaults.precision == "float32");
  CHECK(both.component_for("transformer", "int8") == "transformer_int8");
  CHECK(both.component_for("transformer", "float32") == "transformer");
  CHECK(both.component_for("vae_decoder", "int8") == "vae_decoder");
  CHECK(both.id() != f32.id());
  REQUIRE(with_variant(tmp.path() / "int8-default",
                       R"({"default": "int8", "variants": {"int8": {"transformer": "transformer_int8"}}})") == "");
  CHECK(load_model_package(tmp.path() / "int8-default").defaults.precision == "int8");
  REQUIRE(with_variant(tmp.path() / "fp8", R"({"variants": {"fp8": {"transformer": "transformer_int8"}}})") == "");
  CHECK(load_model_package(tmp.path() / "fp8").component_for("transformer", "fp8") == "transformer_int8");

  CHECK(contains(with_variant(tmp.path() / "bad1", R"({"default": "int8"})"),
                 "'precisions.default' ('int8') is not a precision the package carries"));
  CHECK(contains(with_variant(tmp.path() / "bad2", R"({"variants": {"int4": {"transformer": "transformer_int8"}}})"),
                 "'precisions.variants.int4' names no precision"));
  CHECK(contains(with_variant(tmp.path() / "bad3", R"({"variants": {"int8": {"transformer": "transformer_int9"}}})"),
                 "must map a listed component onto another listed one (got 'transformer_int9')"));
  CHECK(contains(with_variant(tmp.path() / "bad4", R"({"variants": {"float32": {"transformer": "transformer_int8"}}})"),
                 "repeats the base precision"));
  CHECK(contains(with_variant(tmp.path() / "bad5", R"({"variants": {"int8": {}}})"), "must map components to their variants"));
  CHECK(contains(with_variant(tmp.path() / "bad6", R"({"modes": 1})"), "'precisions.modes' is unknown"));
  CHECK(contains(error_with("precisions", "int8"), "'precisions' must be an object"));
}
