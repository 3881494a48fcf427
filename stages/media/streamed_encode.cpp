#include "stages/media/streamed_encode.hpp"

#include "runtime/errors.hpp"

#include <cstring>

namespace vgen {

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
  if (ready_ <= f) throw_error(ErrorKind::cancelled, "encode abandoned: " + failed_);
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
    try {
      const auto wait = [&clip](int f) { clip->wait_for(f); };
      encode_to_file_as_frames_arrive(clip->frames(), audio.get(), out, options, live.get(), wait);
    } catch (...) {
      error = std::current_exception();
    }
    clip->release_frames();
    live.reset();
    {
      std::lock_guard lock(mutex_);
      error_ = error;
    }
    done_.set();
  });
}

StreamedEncode::~StreamedEncode() {
  clip_->fail("the encode's owner went away");
  if (thread_.joinable()) thread_.join();
}

std::exception_ptr StreamedEncode::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

}  // namespace vgen
