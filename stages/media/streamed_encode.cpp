#include "stages/media/streamed_encode.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/errors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

namespace vgen {

namespace fs = std::filesystem;

namespace {

// ".<name>.tmp-<pid>-<12 hex digits>" beside the output: the shape runtime/atomic_file gives
// its temporaries, so sweep_temporaries removes one a crash left.
fs::path streamed_temporary(const fs::path& out) {
  static std::atomic<std::uint64_t> counter{0};
  std::random_device random;
  const std::uint64_t bits = (static_cast<std::uint64_t>(random()) << 16 ^ counter.fetch_add(1)) & 0xffffffffffffULL;
  char hex[13];
  std::snprintf(hex, sizeof hex, "%012llx", static_cast<unsigned long long>(bits));
  return out.parent_path() / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + hex);
}

// rename(2) over the output, then the folder synced so the rename survives a power cut.
void put_in_place(const fs::path& temporary, const fs::path& out) {
  std::error_code ec;
  fs::rename(temporary, out, ec);
  if (ec) throw_error(io_error_kind(ec.value()), "cannot put " + out.string() + " in place: " + ec.message());
  const auto dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

GrowingClip::GrowingClip(int width, int height, int count, double fps)
    : frames_(VideoFrames::allocate(width, height, count, fps)) {}

bool GrowingClip::append(const std::uint8_t* rgb, int n) {
  {
    // The copy runs under the lock, so release_frames() cannot free the bytes beneath it; the
    // encoder reads only frames below ready_ and waits on this lock at most one chunk's copy.
    std::lock_guard lock(mutex_);
    if (!failed_.empty() || released_) return false;
    if (n < 0 || ready_ + n > frames_.count)
      throw_error(ErrorKind::internal, "growing clip: " + std::to_string(ready_ + n) + " frames for a clip of " +
                                           std::to_string(frames_.count));
    std::memcpy(frames_.frame(0) + static_cast<std::size_t>(ready_) * frames_.frame_bytes(), rgb,
                static_cast<std::size_t>(n) * frames_.frame_bytes());
    ready_ += n;
  }
  grown_.notify_all();
  return true;
}

void GrowingClip::fail(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (ready_ == frames_.count || !failed_.empty()) return;
    failed_ = why.empty() ? std::string("the clip was not finished") : why;
  }
  grown_.notify_all();
}

void GrowingClip::wait_for(int f) const {
  std::unique_lock lock(mutex_);
  grown_.wait(lock, [&] { return ready_ > f || !failed_.empty(); });
  if (ready_ <= f || aborted_) throw_error(ErrorKind::cancelled, "encode abandoned: " + failed_);
}

void GrowingClip::abort(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    if (failed_.empty()) failed_ = why.empty() ? std::string("aborted") : why;
  }
  grown_.notify_all();
}

int GrowingClip::ready() const {
  std::lock_guard lock(mutex_);
  return ready_;
}

bool GrowingClip::complete() const { return ready() == frames_.count; }

void GrowingClip::release_frames() {
  std::lock_guard lock(mutex_);
  released_ = true;
  std::vector<std::uint8_t>().swap(frames_.rgb);
}

StreamedEncode::StreamedEncode(std::shared_ptr<GrowingClip> clip, std::shared_ptr<const AudioTrack> audio,
                               std::filesystem::path out, EncodeOptions options, std::shared_ptr<LiveBroadcast> live)
    : clip_(std::move(clip)), live_(live) {
  thread_ = std::thread([this, clip = clip_, live = std::move(live), audio = std::move(audio), out = std::move(out),
                         options = std::move(options)]() mutable {
    std::exception_ptr error;
    const auto temporary = streamed_temporary(out);
    try {
      const auto wait = [&clip](int f) { clip->wait_for(f); };
      encode_to_file_as_frames_arrive(clip->frames(), audio.get(), temporary, options, live.get(), wait);
    } catch (...) {
      error = std::current_exception();
    }
    // The frames and this hold on the stream go once, as soon as the encode is over, well or
    // not: the job may sit between its decode and encode stages for long.
    clip->release_frames();
    live.reset();
    if (!error) {
      try {
        std::unique_lock lock(mutex_);
        word_given_.wait(lock, [this] { return word_ != Word::none; });
        if (word_ == Word::abort) throw_error(ErrorKind::cancelled, "encode abandoned: " + abort_why_);
        lock.unlock();
        put_in_place(temporary, out);
      } catch (...) {
        error = std::current_exception();
      }
    }
    std::error_code ec;
    fs::remove(temporary, ec);  // after an abort or a failure; gone already once put in place
    {
      std::lock_guard lock(mutex_);
      error_ = error;
      ended_ = true;
    }
    done_.set();
  });
}

StreamedEncode::~StreamedEncode() {
  abort("the encode's owner went away");
  if (thread_.joinable()) thread_.join();
}

bool StreamedEncode::abandoned() const {
  std::lock_guard lock(mutex_);
  return ended_ && word_ == Word::abort;
}

void StreamedEncode::commit() {
  {
    std::lock_guard lock(mutex_);
    if (word_ == Word::none) word_ = Word::commit;
  }
  word_given_.notify_all();
}

void StreamedEncode::abort(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (word_ != Word::none) return;
    word_ = Word::abort;
    abort_why_ = why;
  }
  clip_->abort(why);
  word_given_.notify_all();
}

std::exception_ptr StreamedEncode::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

}  // namespace vgen
