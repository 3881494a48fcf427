#include "stages/media/frame_fill.hpp"

extern "C" {
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <cstring>

#include "runtime/errors.hpp"

namespace vgen {

void RgbFiller::fill(const std::uint8_t* rgb, AVFrame* frame) {
  av_image_copy_plane(frame->data[0], frame->linesize[0], rgb, frame->width * 3, frame->width * 3, frame->height);
}

YuvFiller::YuvFiller(int width, int height)
    : width_(width), height_(height), padded_(std::size_t(width) * height * 3 + padding, 0) {
  sws_.reset(av::check_alloc(sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
                                            SWS_BILINEAR | SWS_ACCURATE_RND, nullptr, nullptr, nullptr),
                             "creating the RGB to YUV converter"));
  const int* bt709 = sws_getCoefficients(SWS_CS_ITU709);
  if (sws_setColorspaceDetails(sws_.get(), bt709, 1, bt709, 0, 0, 1 << 16, 1 << 16) < 0) {
    throw Error(ErrorKind::internal, "selecting BT.709 for RGB to YUV: not supported");
  }
}

void YuvFiller::fill(const std::uint8_t* rgb, AVFrame* frame) {
  std::memcpy(padded_.data(), rgb, padded_.size() - padding);
  const std::uint8_t* planes[1] = {padded_.data()};
  const int strides[1] = {width_ * 3};
  const int rows = sws_scale(sws_.get(), planes, strides, 0, height_, frame->data, frame->linesize);
  if (rows <= 0) av::check(rows < 0 ? rows : AVERROR_UNKNOWN, "converting RGB to YUV");
}

PaletteFiller::PaletteFiller(const VideoFrames& frames)
    : width_(frames.width), height_(frames.height), palette_(ClipPalette::build(frames, 255)) {
  argb_.fill(0xff000000u);  // unused entries: opaque black
  argb_[255] = 0;           // the gif encoder's "unchanged since the previous frame"
  const auto& colours = palette_.colours();
  for (std::size_t i = 0; i < colours.size(); ++i) argb_[i] = 0xff000000u | colours[i];
}

void PaletteFiller::fill(const std::uint8_t* rgb, AVFrame* frame) {
  for (int y = 0; y < height_; ++y) {
    std::uint8_t* row = frame->data[0] + static_cast<std::ptrdiff_t>(y) * frame->linesize[0];
    for (int x = 0; x < width_; ++x, rgb += 3) row[x] = palette_.index_of(rgb);
  }
  std::memcpy(frame->data[1], argb_.data(), AVPALETTE_SIZE);
}

}  // namespace vgen
