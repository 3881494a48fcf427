// Test images: a PNG encoded in memory by libav's png encoder (the one encoder every test that
// feeds an image to vgen uses). Header-only test support; each call is independent.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "stages/media/libav.hpp"

namespace vgen::test {

// A w x h RGB24 PNG whose byte at (x byte, row y) is `byte(x, y)` (x runs over w * 3 bytes).
inline std::string png_image(int w, int h, const std::function<std::uint8_t(int, int)>& byte) {
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  REQUIRE(codec);
  av::CodecContextPtr ctx(avcodec_alloc_context3(codec));
  ctx->width = w;
  ctx->height = h;
  ctx->pix_fmt = AV_PIX_FMT_RGB24;
  ctx->time_base = {1, 25};
  av::check(avcodec_open2(ctx.get(), codec, nullptr), "open");
  auto frame = av::alloc_frame();
  frame->width = w;
  frame->height = h;
  frame->format = AV_PIX_FMT_RGB24;
  av::check(av_frame_get_buffer(frame.get(), 0), "buffer");
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w * 3; ++x) frame->data[0][y * frame->linesize[0] + x] = byte(x, y);
  av::check(avcodec_send_frame(ctx.get(), frame.get()), "send");
  avcodec_send_frame(ctx.get(), nullptr);
  auto packet = av::alloc_packet();
  REQUIRE(avcodec_receive_packet(ctx.get(), packet.get()) >= 0);
  return std::string(reinterpret_cast<const char*>(packet->data), static_cast<std::size_t>(packet->size));
}

// A w x h PNG of one grey shade.
inline std::string solid_png(int w, int h, std::uint8_t shade) {
  return png_image(w, h, [shade](int, int) { return shade; });
}

}  // namespace vgen::test
