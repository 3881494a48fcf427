#include "stages/exec/streamed_encodes.hpp"

#include "runtime/errors.hpp"
#include "runtime/job.hpp"
#include "stages/families/family.hpp"
#include "stages/media/live_broadcast.hpp"
#include "stages/media/streamed_encode.hpp"
#include "stages/model/frame_bytes.hpp"

#include <ATen/ATen.h>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <vector>

namespace vgen {

namespace asio = boost::asio;

namespace {

// The frames the family did not hand over (none, when it decoded whole after all) go in now;
// false (the encode ended) for a clip of another length than the encoder was told.
bool complete_clip(GrowingClip& clip, const FamilyJob& w) {
  const auto count = clip.frames().count;
  if (!w.frames.defined() || w.frames.size(0) != count) {
    clip.fail("the decoded clip has " + std::to_string(w.frames.defined() ? w.frames.size(0) : 0) + " frames, not " +
              std::to_string(count));
    return false;
  }
  if (const int ready = clip.ready(); ready < count) {
    const auto rest = to_frame_bytes(w.frames.narrow(0, ready, count - ready));
    clip.append(rest.data_ptr<std::uint8_t>(), count - ready);
  }
  return true;
}

}  // namespace

StreamedEncodes::~StreamedEncodes() = default;  // each encode's destructor aborts and joins it

std::shared_ptr<StreamedEncode> StreamedEncodes::start(FamilyJob& w, EncodeOptions options, std::shared_ptr<LiveBroadcast> live) {
  const auto& s = w.spec;
  auto clip = std::make_shared<GrowingClip>(s.width, s.height, s.frames, s.fps);
  auto streamed = std::make_shared<StreamedEncode>(clip, w.audio, w.output, std::move(options), std::move(live));
  // The encoder runs: from now on the family may hand it frames.
  w.on_frames = [clip](const at::Tensor& frames) {
    if (frames.size(1) != clip->frames().height || frames.size(2) != clip->frames().width)
      throw_error(ErrorKind::internal, "streamed encode: decoded frames of another size than the job's");
    const auto bytes = to_frame_bytes(frames);
    clip->append(bytes.data_ptr<std::uint8_t>(), static_cast<int>(frames.size(0)));
  };
  return streamed;
}

asio::awaitable<void> StreamedEncodes::end_decode(Job& job, FamilyJob& w, std::shared_ptr<StreamedEncode> streamed,
                                                  std::exception_ptr& failed) {
  // A join that ends in a cancel returns while its group may still be starting on the compute
  // thread, which reads on_frames: after any failure it is left set (the clip is aborted below,
  // so the sink hands nothing on; a retry's start replaces it once that group has ended) and
  // goes with the job. A join that returned normally ends after its group's decode.
  if (!failed) w.on_frames = nullptr;
  if (!streamed) co_return;
  bool goes_on = false;
  try {
    goes_on = !failed && complete_clip(streamed->clip(), w);
  } catch (...) {
    failed = std::current_exception();
  }
  if (goes_on) {
    keep(job.id(), streamed);
    // The file becomes the job's only through its encode stage (finish). A job that ends before
    // it aborts the encode: no file, no stream left open.
    job.subscribe([weak = std::weak_ptr<StreamedEncode>(streamed)](const JobEvent& e) {
      if (!is_terminal(e.state)) return;
      if (auto s = weak.lock()) s->abort("the job ended before its encode stage");
    });
    if (is_terminal(job.state())) streamed->abort("the job ended before its encode stage");
    co_return;
  }
  // The encoder stops at its next frame and its stream ends failed; the encode stage (after a
  // successful retry) encodes the job as any other, to a fresh stream.
  streamed->abort("decode failed");
  try {
    co_await streamed->done().wait();
  } catch (...) {
    // Cancelled meanwhile: the encode stops on its own at its next frame.
  }
  if (auto live = streamed->live()) live->finish(LiveBroadcast::End::failed);
}

asio::awaitable<bool> StreamedEncodes::finish(const Job& job) {
  auto streamed = take(job.id());
  if (!streamed) co_return false;
  streamed->commit();  // the file is the job's now: in place once encoded
  // A cancel from here on is too late (the header says why). Its emission leaves the coroutine
  // cancelled (Asio then aborts its next await, a wait or not) and aborts the wait under way:
  // the state is cleared and the wait taken up again until the encode ends, so the caller goes
  // on as if no cancel had come.
  for (;;) {
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
      co_await asio::this_coro::reset_cancellation_state();
    if (streamed->done().is_set()) break;
    try {
      co_await streamed->done().wait(asio::use_awaitable);
    } catch (const boost::system::system_error&) {
    }
  }
  const auto live = streamed->live();
  if (auto error = streamed->error()) {
    if (live) live->finish(LiveBroadcast::End::failed);
    std::rethrow_exception(error);
  }
  if (live) live->finish(LiveBroadcast::End::complete);
  co_return true;
}

std::size_t StreamedEncodes::size() const {
  std::lock_guard lock(mutex_);
  return by_job_.size();
}

void StreamedEncodes::keep(const std::string& id, std::shared_ptr<StreamedEncode> streamed) {
  std::vector<std::shared_ptr<StreamedEncode>> gone;  // destroyed (joined) outside the lock
  std::lock_guard lock(mutex_);
  // Entries of jobs that ended before their encode stage (aborted, their threads done) go with
  // the next one.
  for (auto it = by_job_.begin(); it != by_job_.end();)
    if (it->second->abandoned()) gone.push_back(std::move(it->second)), it = by_job_.erase(it);
    else ++it;
  by_job_[id] = std::move(streamed);
}

std::shared_ptr<StreamedEncode> StreamedEncodes::take(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = by_job_.find(id);
  if (it == by_job_.end()) return nullptr;
  auto out = std::move(it->second);
  by_job_.erase(it);
  return out;
}

}  // namespace vgen
