#include "stages/model/lora.hpp"

#include "runtime/errors.hpp"
#include "stages/model/model_package.hpp"  // sha256_file

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/InferenceMode.h>

#include <cstdio>
#include <cstring>
#include <regex>

namespace vgen {

namespace fs = std::filesystem;

namespace {

// Original Wan layer names -> diffusers' WanTransformer3DModel names (data: one row a rule).
const std::pair<const char*, const char*> kLayerRenames[] = {
    {R"(^blocks\.(\d+)\.self_attn\.q$)", "blocks.$1.attn1.to_q"},
    {R"(^blocks\.(\d+)\.self_attn\.k$)", "blocks.$1.attn1.to_k"},
    {R"(^blocks\.(\d+)\.self_attn\.v$)", "blocks.$1.attn1.to_v"},
    {R"(^blocks\.(\d+)\.self_attn\.o$)", "blocks.$1.attn1.to_out.0"},
    {R"(^blocks\.(\d+)\.self_attn\.norm_q$)", "blocks.$1.attn1.norm_q"},
    {R"(^blocks\.(\d+)\.self_attn\.norm_k$)", "blocks.$1.attn1.norm_k"},
    {R"(^blocks\.(\d+)\.cross_attn\.q$)", "blocks.$1.attn2.to_q"},
    {R"(^blocks\.(\d+)\.cross_attn\.k$)", "blocks.$1.attn2.to_k"},
    {R"(^blocks\.(\d+)\.cross_attn\.v$)", "blocks.$1.attn2.to_v"},
    {R"(^blocks\.(\d+)\.cross_attn\.o$)", "blocks.$1.attn2.to_out.0"},
    {R"(^blocks\.(\d+)\.cross_attn\.k_img$)", "blocks.$1.attn2.add_k_proj"},
    {R"(^blocks\.(\d+)\.cross_attn\.v_img$)", "blocks.$1.attn2.add_v_proj"},
    {R"(^blocks\.(\d+)\.cross_attn\.norm_q$)", "blocks.$1.attn2.norm_q"},
    {R"(^blocks\.(\d+)\.cross_attn\.norm_k$)", "blocks.$1.attn2.norm_k"},
    {R"(^blocks\.(\d+)\.cross_attn\.norm_k_img$)", "blocks.$1.attn2.norm_added_k"},
    {R"(^blocks\.(\d+)\.ffn\.0$)", "blocks.$1.ffn.net.0.proj"},
    {R"(^blocks\.(\d+)\.ffn\.2$)", "blocks.$1.ffn.net.2"},
    {R"(^blocks\.(\d+)\.norm3$)", "blocks.$1.norm2"},
    {R"(^blocks\.(\d+)\.modulation$)", "blocks.$1.scale_shift_table"},
    {R"(^text_embedding\.0$)", "condition_embedder.text_embedder.linear_1"},
    {R"(^text_embedding\.2$)", "condition_embedder.text_embedder.linear_2"},
    {R"(^time_embedding\.0$)", "condition_embedder.time_embedder.linear_1"},
    {R"(^time_embedding\.2$)", "condition_embedder.time_embedder.linear_2"},
    {R"(^time_projection\.1$)", "condition_embedder.time_proj"},
    {R"(^img_emb\.proj\.0$)", "condition_embedder.image_embedder.norm1"},
    {R"(^img_emb\.proj\.1$)", "condition_embedder.image_embedder.ff.net.0.proj"},
    {R"(^img_emb\.proj\.3$)", "condition_embedder.image_embedder.ff.net.2"},
    {R"(^img_emb\.proj\.4$)", "condition_embedder.image_embedder.norm2"},
    {R"(^head\.head$)", "proj_out"},
    {R"(^head\.modulation$)", "scale_shift_table"},
};

const char* const kPrefixes[] = {"model.diffusion_model.", "diffusion_model.", "transformer.", "base_model.model."};

enum class Role { up, down, alpha, diff, diff_b };
const std::pair<const char*, Role> kSuffixes[] = {
    {".lora_A.weight", Role::down}, {".lora_down.weight", Role::down}, {".lora_B.weight", Role::up},
    {".lora_up.weight", Role::up},  {".alpha", Role::alpha},           {".diff_b", Role::diff_b},
    {".diff", Role::diff}};

bool ends_with(const std::string& s, std::string_view x) { return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0; }

std::string renamed(const std::string& path) {
  static const auto rules = [] {
    std::vector<std::pair<std::regex, std::string>> r;
    for (auto [from, to] : kLayerRenames) r.emplace_back(std::regex(from), to);
    return r;
  }();
  for (const auto& [re, to] : rules)
    if (std::regex_search(path, re)) return std::regex_replace(path, re, to);
  return path;
}

std::int64_t product(const std::vector<std::int64_t>& s, std::size_t from) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < s.size(); ++i) n *= s[i];
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Parameter lookup by layer path: the exact name, else the one name ending in "." + path.
class ParameterIndex {
 public:
  explicit ParameterIndex(const ParameterShapes& shapes) : shapes_(shapes) {
    for (const auto& [name, _] : shapes)
      for (std::size_t i = name.find('.'); i != std::string::npos; i = name.find('.', i + 1)) {
        auto [it, fresh] = by_suffix_.emplace(name.substr(i + 1), name);
        if (!fresh && it->second != name) it->second.clear();  // ambiguous
      }
  }
  const std::string* find(const std::string& path) const {
    if (auto it = shapes_.find(path); it != shapes_.end()) return &it->first;
    auto it = by_suffix_.find(path);
    return it == by_suffix_.end() || it->second.empty() ? nullptr : &it->second;
  }

 private:
  const ParameterShapes& shapes_;
  std::map<std::string, std::string> by_suffix_;
};

}  // namespace

ParameterShapes parameter_shapes(const Module& module) {
  ParameterShapes out;
  for (const auto& [name, t] : module.parameters()) out.emplace(name, t.sizes().vec());
  return out;
}

void LoraFile::fail(const std::string& key, const std::string& what) const {
  throw_error(ErrorKind::invalid_argument,
              "lora file '" + st_.file().string() + "': key '" + truncate_utf8(key, 200) + "': " + what);
}

std::shared_ptr<const LoraFile> LoraFile::open(const fs::path& file) {
  std::shared_ptr<LoraFile> f(new LoraFile(SafetensorsFile::open(file)));
  f->sha256_ = sha256_file(file);
  f->suggestion_ = read_sampling_suggestion(f->st_.metadata(), "lora file '" + file.string() + "'");
  if (auto it = f->st_.metadata().find("lora_adapter_metadata"); it != f->st_.metadata().end()) {
    boost::json::value meta;
    try {
      meta = boost::json::parse(it->second);
    } catch (const std::exception&) {
      f->fail("__metadata__.lora_adapter_metadata", "is not JSON");
    }
    if (const auto* o = meta.if_object()) {
      if (const auto* a = o->if_contains("transformer.lora_alpha"); a && a->is_number()) f->metadata_alpha_ = a->to_number<double>();
      if (const auto* r = o->if_contains("transformer.use_rslora"); r && r->is_bool() && r->get_bool())
        f->fail("__metadata__.lora_adapter_metadata", "use_rslora is not supported");
      for (const char* k : {"transformer.alpha_pattern", "transformer.rank_pattern"})
        if (const auto* p = o->if_contains(k); p && p->is_object() && !p->get_object().empty())
          f->fail("__metadata__.lora_adapter_metadata", std::string(k + 12) + " is not supported");
    }
  }
  for (const auto& t : f->st_.tensors()) {
    std::string rest = t.name;
    for (const char* p : kPrefixes)
      if (rest.rfind(p, 0) == 0) {
        rest = rest.substr(std::strlen(p));
        break;
      }
    const std::pair<const char*, Role>* found = nullptr;
    for (const auto& s : kSuffixes)
      if (ends_with(rest, s.first)) {
        found = &s;
        break;
      }
    if (!found) f->fail(t.name, "not a LoRA key (lora_A/lora_B, lora_down/lora_up, alpha, diff, diff_b)");
    const auto path = renamed(rest.substr(0, rest.size() - std::strlen(found->first)));
    auto& layer = f->layers_[path];
    if (layer.key.empty()) {
      layer.path = path;
      layer.key = t.name;
    }
    const SafetensorsTensor** slot = nullptr;
    switch (found->second) {
      case Role::up: slot = &layer.up; break;
      case Role::down: slot = &layer.down; break;
      case Role::alpha: slot = &layer.alpha; break;
      case Role::diff: slot = &layer.diff; break;
      case Role::diff_b: slot = &layer.diff_b; break;
    }
    if (*slot) f->fail(t.name, "a second key for the same layer and role");
    *slot = &t;
  }
  for (const auto& [path, l] : f->layers_) {
    if (!l.up != !l.down) f->fail(l.key, std::string("has no matching ") + (l.up ? "lora_down/lora_A" : "lora_up/lora_B") + " weight");
    if (l.alpha && !l.up) f->fail(l.key, "an alpha without a lora_up/lora_down pair");
    if (l.alpha && l.alpha->elements() != 1) f->fail(l.alpha->name, "alpha must be a scalar");
    if (l.up && (l.up->shape.size() < 2 || l.down->shape.size() < 2 || l.up->shape[1] != l.down->shape[0] || l.down->shape[0] < 1))
      f->fail(l.key, "lora_up " + shape_text(l.up->shape) + " and lora_down " + shape_text(l.down->shape) + " do not share a rank");
  }
  if (f->layers_.empty()) throw_error(ErrorKind::invalid_argument, "lora file '" + file.string() + "': holds no tensors");
  return f;
}

std::vector<LoraUpdate> LoraFile::map_onto(const ParameterShapes& shapes) const {
  const ParameterIndex index(shapes);
  std::vector<LoraUpdate> out;
  auto param = [&](const std::string& key, const std::string& path, const char* suffix) -> const std::string& {
    const std::string* p = index.find(path + suffix);
    if (!p && std::string_view(suffix) == ".weight") p = index.find(path);  // scale_shift_table: no .weight
    if (!p) fail(key, "matches no layer of the model ('" + path + suffix + "')");
    return *p;
  };
  for (const auto& [path, l] : layers_) {
    if (l.up) {
      LoraUpdate u{.parameter = param(l.key, path, ".weight"), .key = l.key, .up = l.up, .down = l.down};
      const auto& w = shapes.at(u.parameter);
      if (w.size() < 2 || l.up->shape[0] != w[0] || product(l.down->shape, 1) != product(w, 1) || product(l.up->shape, 2) != 1)
        fail(l.key, "lora_up " + shape_text(l.up->shape) + " @ lora_down " + shape_text(l.down->shape) + " does not fit " +
                        u.parameter + " " + shape_text(w));
      const double rank = static_cast<double>(l.down->shape[0]);
      double alpha = rank;
      if (l.alpha) alpha = load(*l.alpha).item<double>();
      else if (metadata_alpha_ > 0) alpha = metadata_alpha_;
      u.alpha_over_rank = alpha / rank;
      out.push_back(u);
    }
    for (auto [t, suffix] : {std::pair{l.diff, ".weight"}, std::pair{l.diff_b, ".bias"}}) {
      if (!t) continue;
      LoraUpdate u{.parameter = param(t->name, path, suffix), .key = t->name, .diff = t};
      if (t->shape != shapes.at(u.parameter))
        fail(t->name, "shape " + shape_text(t->shape) + " does not fit " + u.parameter + " " + shape_text(shapes.at(u.parameter)));
      out.push_back(u);
    }
  }
  return out;
}

at::Tensor LoraFile::load(const SafetensorsTensor& t) const {
  c10::ScalarType type;
  if (t.dtype == "F32") type = at::kFloat;
  else if (t.dtype == "F16") type = at::kHalf;
  else if (t.dtype == "BF16") type = at::kBFloat16;
  else if (t.dtype == "F64") type = at::kDouble;
  else fail(t.name, "dtype " + t.dtype + " is not a float type");
  const auto bytes = st_.read(t);
  auto out = at::empty(t.shape, at::TensorOptions().dtype(type));
  std::memcpy(out.data_ptr(), bytes.data(), bytes.size());  // safetensors is little-endian, as our hosts
  return out.to(at::kFloat);
}

at::Tensor LoraFile::delta(const LoraUpdate& u, const std::vector<std::int64_t>& shape, c10::Device device) const {
  if (u.diff) return load(*u.diff).to(device).reshape(shape);
  auto up = load(*u.up).to(device).reshape({u.up->shape[0], u.up->shape[1]});
  auto down = load(*u.down).to(device).reshape({u.down->shape[0], -1});
  return (at::matmul(up, down) * u.alpha_over_rank).reshape(shape);
}

std::map<std::string, at::Tensor> merge_loras(const Module& base, const std::vector<LoraChoice>& set) {
  c10::InferenceMode guard;
  const auto params = base.parameters();
  ParameterShapes shapes;
  for (const auto& [name, t] : params) shapes.emplace(name, t.sizes().vec());
  std::map<std::string, at::Tensor> sum;  // float32 deltas, scaled
  for (const auto& choice : set)
    for (const auto& u : choice.file->map_onto(shapes)) {
      const auto& w = params.at(u.parameter);
      auto d = choice.file->delta(u, shapes.at(u.parameter), w.device()) * choice.scale;
      auto [it, fresh] = sum.emplace(u.parameter, d);
      if (!fresh) it->second.add_(d);
    }
  std::map<std::string, at::Tensor> out;
  for (auto& [name, d] : sum) {
    const auto& w = params.at(name);
    out.emplace(name, (w.to(at::kFloat) + d).to(w.scalar_type()).contiguous());
  }
  return out;
}

std::shared_ptr<const LoraFile> LoraLibrary::get(const std::string& name) {
  const auto file = resolve_lora_file(dir_, name);
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  const auto mtime = fs::last_write_time(file, ec);
  {
    std::lock_guard lock(mutex_);
    if (auto it = files_.find(file); it != files_.end() && it->second.size == size && it->second.mtime == mtime)
      return it->second.file;
  }
  auto opened = LoraFile::open(file);  // outside the lock: hashing a large file takes a while
  std::lock_guard lock(mutex_);
  files_[file] = Entry{size, mtime, opened};
  return opened;
}

std::vector<LoraChoice> LoraLibrary::resolve(std::vector<LoraRef>& refs) {
  std::vector<LoraChoice> out;
  for (auto& r : refs) {
    auto f = get(r.name);
    r.sha256 = f->sha256();
    out.push_back({std::move(f), r.scale});
  }
  return out;
}

std::string lora_set_key(const std::vector<LoraRef>& refs) {
  std::string k;
  for (const auto& r : refs) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.17g", r.scale);
    k += r.name + "@" + r.sha256 + "*" + scale + ";";
  }
  return k;
}

}  // namespace vgen
