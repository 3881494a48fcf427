#include "stages/exec/checkpoint.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"
#include "stages/families/family.hpp"

#include <ATen/ATen.h>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include <cstring>
#include <fstream>
#include <sstream>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

// ---- the file format ---------------------------------------------------------------------
// "VGENCKP1" | u64 header length | header JSON | tensor bytes | SHA-256 of all before (32 B).
// Header: {"identity", "total", "step", "counters": [...], "tensors": [null | {"dtype", "shape"}]}
// where tensors[0] is the latents and the rest the scheduler row's tensors, each written
// contiguous in the machine's byte order (a checkpoint is read back by the same build family).

namespace {

constexpr std::string_view magic = "VGENCKP1";
constexpr std::size_t digest_size = 32;

const std::pair<const char*, at::ScalarType> dtypes[] = {
    {"float32", at::kFloat}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float64", at::kDouble}, {"int64", at::kLong}};

const char* dtype_name(at::ScalarType t) {
  for (const auto& [n, d] : dtypes)
    if (d == t) return n;
  throw_error(ErrorKind::internal, "checkpoint: unsupported tensor dtype");
}

std::optional<at::ScalarType> dtype_of(std::string_view name) {
  for (const auto& [n, d] : dtypes)
    if (name == n) return d;
  return std::nullopt;
}

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(std::string_view in) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

}  // namespace

std::string encode_checkpoint(const std::string& identity, int total, const StepState& state) {
  std::vector<at::Tensor> tensors{state.latents};
  tensors.insert(tensors.end(), state.scheduler.tensors.begin(), state.scheduler.tensors.end());
  json::array described;
  std::vector<at::Tensor> bodies;
  for (const auto& t : tensors) {
    if (!t.defined()) {
      described.emplace_back(nullptr);
      continue;
    }
    const auto c = t.to(at::kCPU).contiguous();
    json::array shape;
    for (auto d : c.sizes()) shape.emplace_back(d);
    described.emplace_back(json::object{{"dtype", dtype_name(c.scalar_type())}, {"shape", std::move(shape)}});
    bodies.push_back(c);
  }
  json::array counters;
  for (auto c : state.scheduler.counters) counters.emplace_back(c);
  const std::string header = json::serialize(json::object{{"identity", identity},
                                                          {"total", total},
                                                          {"step", state.step},
                                                          {"counters", std::move(counters)},
                                                          {"tensors", std::move(described)}});
  std::string out(magic);
  put_u64(out, header.size());
  out += header;
  for (const auto& b : bodies) out.append(static_cast<const char*>(b.data_ptr()), b.nbytes());
  const auto digest = content_key_bytes(out);
  out.append(reinterpret_cast<const char*>(digest.bytes.data()), digest.bytes.size());
  return out;
}

namespace {

std::optional<StepState> decode(std::string_view bytes, const std::string& identity, int total) {
  const std::size_t fixed = magic.size() + 8;
  if (bytes.size() < fixed + digest_size || bytes.substr(0, magic.size()) != magic) return std::nullopt;
  const auto body = bytes.substr(0, bytes.size() - digest_size);
  const auto digest = content_key_bytes(body);
  if (std::memcmp(digest.bytes.data(), bytes.data() + body.size(), digest_size) != 0) return std::nullopt;
  const std::uint64_t header_len = get_u64(bytes.substr(magic.size(), 8));
  if (header_len > body.size() - fixed) return std::nullopt;
  boost::system::error_code ec;
  const auto doc = json::parse(body.substr(fixed, header_len), ec);
  const auto* h = doc.if_object();
  if (ec || !h) return std::nullopt;
  try {
    if (json::value_to<std::string>(h->at("identity")) != identity || h->at("total").to_number<int>() != total)
      return std::nullopt;
    StepState state;
    state.step = h->at("step").to_number<int>();
    if (state.step < 1 || state.step >= total) return std::nullopt;
    for (const auto& c : h->at("counters").as_array()) state.scheduler.counters.push_back(c.to_number<std::int64_t>());
    std::size_t offset = fixed + header_len;
    std::vector<at::Tensor> tensors;
    for (const auto& d : h->at("tensors").as_array()) {
      if (d.is_null()) {
        tensors.emplace_back();
        continue;
      }
      const auto dtype = dtype_of(json::value_to<std::string>(d.at("dtype")));
      if (!dtype) return std::nullopt;
      std::vector<std::int64_t> shape;
      std::uint64_t n = 1;
      for (const auto& s : d.at("shape").as_array()) {
        const auto v = s.to_number<std::int64_t>();
        if (v < 0 || v > (std::int64_t{1} << 40) || (v && n > (std::uint64_t{1} << 40) / static_cast<std::uint64_t>(v)))
          return std::nullopt;
        n *= static_cast<std::uint64_t>(v);
        shape.push_back(v);
      }
      const std::uint64_t size = n * at::elementSize(*dtype);
      if (size > body.size() - offset) return std::nullopt;
      auto t = at::empty(shape, at::TensorOptions().dtype(*dtype));
      std::memcpy(t.data_ptr(), body.data() + offset, size);
      offset += size;
      tensors.push_back(std::move(t));
    }
    if (offset != body.size() || tensors.empty() || !tensors.front().defined()) return std::nullopt;
    state.latents = tensors.front();
    state.scheduler.tensors.assign(tensors.begin() + 1, tensors.end());
    state.resumed_from = state.step;
    return state;
  } catch (const std::exception&) {  // a missing or mistyped member
    return std::nullopt;
  }
}

}  // namespace

bool decode_checkpoint(std::string_view bytes, const std::string& identity, int total, StepState& out) {
  auto state = decode(bytes, identity, total);
  if (state) out = std::move(*state);
  return state.has_value();
}

// ---- the store ---------------------------------------------------------------------------

struct Checkpoints::Pending {
  std::string job_id, key;
  int total = 0;
  StepState state;
};

Checkpoints::Checkpoints(CheckpointOptions options, WorkerPool& pool, MetricsRegistry* metrics, OnWritten on_written)
    : options_(std::move(options)), pool_(pool), metrics_(metrics), on_written_(std::move(on_written)) {
  std::error_code ec;
  if (!fs::is_directory(options_.dir, ec)) return;  // made by the first write
  sweep_temporaries(options_.dir);
  const auto now = fs::file_time_type::clock::now();
  for (const auto& e : fs::directory_iterator(options_.dir, ec)) {
    if (!e.is_regular_file(ec) || e.path().extension() != ".ckpt") continue;
    if (now - e.last_write_time(ec) > options_.keep_for) {
      fs::remove(e.path(), ec);
      continue;
    }
    account(e.path().stem().string(), e.file_size(ec));
  }
}

Checkpoints::~Checkpoints() {
  try {  // the writes posted so far use this object: let them finish (a stopped pool runs none)
    pool_.run([] {}, boost::asio::use_future).get();
  } catch (...) {
  }
  std::error_code ec;
  fs::remove(options_.dir, ec);  // only if empty: a run that needed none leaves no folder
}

fs::path Checkpoints::file_for(const std::string& key_hex) const { return options_.dir / (key_hex + ".ckpt"); }

void Checkpoints::account(const std::string& key, std::uint64_t bytes) {
  auto& slot = files_[key];
  bytes_ = bytes_ - slot + bytes;
  slot = bytes;
  if (bytes == 0) files_.erase(key);
  if (metrics_)
    metrics_->gauge("vgen_checkpoint_bytes", "Bytes of step checkpoints on disk", {}).set(static_cast<double>(bytes_));
}

void Checkpoints::warn(const std::string& message) const {
  if (options_.warn) options_.warn(message);
}

void Checkpoints::count(const char* name, const char* help, double by) {
  if (metrics_) metrics_->counter(name, help, {}).inc(by);
}

void Checkpoints::begin(const Job& job, const std::string& key_hex, int step) {
  std::lock_guard lock(mutex_);
  dropped_.erase(key_hex);
  running_[&job] = Tracked{key_hex, step, std::chrono::steady_clock::now()};
}

void Checkpoints::end(const Job& job) {
  std::lock_guard lock(mutex_);
  running_.erase(&job);
}

int Checkpoints::restore(const std::string& key_hex, FamilyJob& work) {
  const auto file = file_for(key_hex);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return 0;
  std::ifstream in(file, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const auto& like = work.state.latents;
  auto state = decode(buffer.str(), key_hex, work.spec.steps);
  if (!state || !like.defined() || !state->latents.sizes().equals(like.sizes()) ||
      state->latents.scalar_type() != like.scalar_type()) {
    warn("checkpoint " + file.string() + " does not fit its job (damaged or from another version): starting at step 0");
    count("vgen_checkpoints_invalid_total", "Checkpoint files ignored because they did not verify or fit");
    std::lock_guard lock(mutex_);
    fs::remove(file, ec);
    account(key_hex, 0);
    return 0;
  }
  count("vgen_checkpoint_resumes_total", "Jobs resumed from a step checkpoint");
  work.state = std::move(*state);
  return work.state.step;
}

void Checkpoints::drop(const std::string& key_hex) {
  {
    std::lock_guard lock(mutex_);
    dropped_.insert(key_hex);
  }
  // On the checkpoint thread, after any write already posted for this key (even one that
  // is running now and not yet counted).
  auto remove = [this, key_hex] {
    std::error_code ec;
    fs::remove(file_for(key_hex), ec);
    std::lock_guard lock(mutex_);
    account(key_hex, 0);
  };
  pool_.run(remove, boost::asio::detached);
}

void Checkpoints::after_step(const std::vector<Job*>& jobs, const std::vector<FamilyJob*>& work, const Scheduler& scheduler) {
  if (!scheduler.resumable()) return;
  const int total = scheduler.num_inference_steps();
  if (total < options_.min_steps) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<Pending> due;
  {
    std::lock_guard lock(mutex_);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      auto it = running_.find(jobs[j]);
      const int step = work[j]->state.step;
      // A step-cached job's cache state lives in the loop, not in StepState: resumed, it would
      // not end with the bytes of an uninterrupted run, so it is not checkpointed.
      if (it == running_.end() || step >= total || work[j]->spec.step_cache > 0) continue;
      auto& t = it->second;
      const bool by_steps = options_.every_steps > 0 && step - t.last_step >= options_.every_steps;
      const bool by_time =
          options_.every_seconds > 0 && now - t.last_time >= std::chrono::duration<double>(options_.every_seconds);
      if (!by_steps && !by_time) continue;
      t.last_step = step;
      t.last_time = now;
      Pending p{jobs[j]->id(), t.key, total, StepState{step, work[j]->state.latents.clone(), {}, 0}};
      for (const auto& h : work[j]->state.scheduler.tensors) p.state.scheduler.tensors.push_back(h.defined() ? h.clone() : h);
      p.state.scheduler.counters = work[j]->state.scheduler.counters;
      due.push_back(std::move(p));
    }
  }
  if (due.empty()) return;
  auto task = [this, due = std::make_shared<std::vector<Pending>>(std::move(due))] { write(*due); };
  pool_.run(std::move(task), boost::asio::detached);
}

void Checkpoints::write(const std::vector<Pending>& due) {
  std::vector<CheckpointWritten> written;
  for (const auto& p : due) {
    const std::string bytes = encode_checkpoint(p.key, p.total, p.state);
    {
      std::lock_guard lock(mutex_);
      if (dropped_.count(p.key)) continue;
      const auto old = files_.count(p.key) ? files_[p.key] : 0;
      if (bytes_ - old + bytes.size() > options_.max_bytes) {
        count("vgen_checkpoints_skipped_total", "Checkpoints not written because of the disk budget");
        continue;
      }
    }
    try {
      std::error_code ec;
      fs::create_directories(options_.dir, ec);  // a failure shows in the write's error
      write_file_atomically(file_for(p.key), bytes);
    } catch (const std::exception& e) {  // a full disk costs the checkpoint, not the job
      warn("checkpoint of job " + p.job_id + " not written: " + e.what());
      count("vgen_checkpoints_failed_total", "Checkpoint writes that failed (disk full, I/O error)");
      continue;
    }
    {
      std::lock_guard lock(mutex_);
      account(p.key, bytes.size());
    }
    count("vgen_checkpoints_written_total", "Step checkpoints written");
    written.push_back(CheckpointWritten{p.job_id, file_for(p.key), p.state.step, p.total});
  }
  if (!written.empty() && on_written_) on_written_(written);
}

std::uint64_t Checkpoints::disk_bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace vgen
