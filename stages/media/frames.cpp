#include "stages/media/frames.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/errors.hpp"

namespace vgen {
namespace {

constexpr double max_fps = 240.0;

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, "VideoFrames: " + message);
}

// Checks everything but the pixel buffer; returns count * frame_bytes().
std::size_t checked_total_bytes(int width, int height, int count, double fps) {
  if (width <= 0) reject("width must be positive (got " + std::to_string(width) + ")");
  if (height <= 0) reject("height must be positive (got " + std::to_string(height) + ")");
  if (count <= 0) reject("count must be positive (got " + std::to_string(count) + ")");
  // !(a && b) also rejects NaN.
  if (!(fps > 0.0 && fps <= max_fps)) {
    reject("fps must be in (0, 240] (got " + std::to_string(fps) + ")");
  }
  constexpr std::size_t limit = std::numeric_limits<std::size_t>::max();
  const auto w = static_cast<std::size_t>(width);
  const auto h = static_cast<std::size_t>(height);
  const auto n = static_cast<std::size_t>(count);
  if (w > limit / 3 / h || n > limit / (w * h * 3)) reject("width * height * count * 3 overflows");
  return w * h * 3 * n;
}

// Bilinear sample positions along one axis: source index pair and the weight of the second,
// in 1/256 units, for each destination index.
struct AxisTaps {
  std::vector<int> first, second, weight;
};

AxisTaps axis_taps(int in_size, int out_size) {
  AxisTaps taps;
  taps.first.resize(out_size);
  taps.second.resize(out_size);
  taps.weight.resize(out_size);
  const double scale = static_cast<double>(in_size) / out_size;
  for (int i = 0; i < out_size; ++i) {
    const double src = std::clamp((i + 0.5) * scale - 0.5, 0.0, static_cast<double>(in_size - 1));
    const int lo = static_cast<int>(std::floor(src));
    taps.first[i] = lo;
    taps.second[i] = std::min(lo + 1, in_size - 1);
    taps.weight[i] = static_cast<int>(std::lround((src - lo) * 256.0));
  }
  return taps;
}

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Position along an axis of length `span` after `steps` unit moves, bouncing at both ends.
int bounce(long long start, long long steps, int span) {
  if (span <= 0) return 0;
  const long long period = 2LL * span;
  const long long p = (start + steps) % period;
  return static_cast<int>(p <= span ? p : period - p);
}

// One cell of ClipPalette's 32x32x32 colour histogram.
struct Bin {
  std::uint64_t count = 0;
  std::array<std::uint64_t, 3> sum{};
  std::array<int, 3> mean{};  // of the pixels in the cell; the cell centre when empty
};
struct Box {
  std::size_t begin, end;  // a range of (non-empty) bins
  int channel = 0;         // the channel whose means spread widest in the box
  int range = 0;           // that spread; 0 for a single bin
};

Box make_box(const std::vector<Bin>& bins, std::size_t begin, std::size_t end) {
  Box box{begin, end};
  for (int c = 0; c < 3; ++c) {
    int lo = 255, hi = 0;
    for (std::size_t i = begin; i < end; ++i) {
      lo = std::min(lo, bins[i].mean[c]);
      hi = std::max(hi, bins[i].mean[c]);
    }
    if (hi - lo > box.range) box.channel = c, box.range = hi - lo;
  }
  return box;
}

// Splits the box with the widest channel range at its count-weighted median until there are
// `limit` boxes or every box holds a single bin.
std::vector<Box> median_cut(std::vector<Bin>& bins, std::size_t limit) {
  std::vector<Box> boxes{make_box(bins, 0, bins.size())};
  while (boxes.size() < limit) {
    const auto widest = std::max_element(
        boxes.begin(), boxes.end(), [](const Box& x, const Box& y) { return x.range < y.range; });
    if (widest->range == 0) break;
    const Box box = *widest;
    const auto first = bins.begin() + static_cast<std::ptrdiff_t>(box.begin);
    const auto last = bins.begin() + static_cast<std::ptrdiff_t>(box.end);
    std::sort(first, last, [c = box.channel](const Bin& x, const Bin& y) {
      return x.mean[c] < y.mean[c];
    });
    std::uint64_t total = 0, running = 0;
    for (auto it = first; it != last; ++it) total += it->count;
    auto split = first + 1;  // both halves keep at least one bin
    for (auto it = first; it + 1 != last; ++it) {
      running += it->count;
      split = it + 1;
      if (2 * running >= total) break;
    }
    const auto middle = static_cast<std::size_t>(split - bins.begin());
    *widest = make_box(bins, box.begin, middle);
    boxes.push_back(make_box(bins, middle, box.end));
  }
  return boxes;
}

}  // namespace

std::size_t VideoFrames::frame_bytes() const {
  return static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3;
}

const std::uint8_t* VideoFrames::frame(int f) const {
  assert(f >= 0 && f < count);
  return rgb.data() + static_cast<std::size_t>(f) * frame_bytes();
}

std::uint8_t* VideoFrames::frame(int f) {
  assert(f >= 0 && f < count);
  return rgb.data() + static_cast<std::size_t>(f) * frame_bytes();
}

void VideoFrames::validate() const {
  const std::size_t expected = checked_total_bytes(width, height, count, fps);
  if (rgb.size() != expected) {
    reject("rgb has " + std::to_string(rgb.size()) +
           " bytes, expected count * width * height * 3 = " + std::to_string(expected));
  }
}

VideoFrames VideoFrames::allocate(int width, int height, int count, double fps) {
  VideoFrames frames;
  const std::size_t total = checked_total_bytes(width, height, count, fps);
  frames.width = width;
  frames.height = height;
  frames.count = count;
  frames.fps = fps;
  frames.rgb.assign(total, 0);
  return frames;
}

VideoFrames resize_frames(const VideoFrames& in, int width, int height) {
  in.validate();
  VideoFrames out = VideoFrames::allocate(width, height, in.count, in.fps);
  if (width == in.width && height == in.height) {
    out.rgb = in.rgb;
    return out;
  }
  const AxisTaps xs = axis_taps(in.width, width);
  const AxisTaps ys = axis_taps(in.height, height);
  const std::size_t in_row = static_cast<std::size_t>(in.width) * 3;
  for (int f = 0; f < in.count; ++f) {
    const std::uint8_t* src = in.frame(f);
    std::uint8_t* dst = out.frame(f);
    for (int y = 0; y < height; ++y) {
      const std::uint8_t* top = src + ys.first[y] * in_row;
      const std::uint8_t* bottom = src + ys.second[y] * in_row;
      const int wy = ys.weight[y];
      for (int x = 0; x < width; ++x) {
        const int a = xs.first[x] * 3;
        const int b = xs.second[x] * 3;
        const int wx = xs.weight[x];
        for (int c = 0; c < 3; ++c) {
          // Fixed point: each pass weights sum to 256, so a constant image stays constant.
          const int t = top[a + c] * (256 - wx) + top[b + c] * wx;
          const int u = bottom[a + c] * (256 - wx) + bottom[b + c] * wx;
          *dst++ = static_cast<std::uint8_t>((t * (256 - wy) + u * wy + 32768) >> 16);
        }
      }
    }
  }
  return out;
}

ClipPalette ClipPalette::build(const VideoFrames& frames, int max_colours) {
  frames.validate();
  if (max_colours < 1 || max_colours > 256) {
    throw Error(ErrorKind::invalid_argument,
                "ClipPalette: max_colours must be in [1, 256], got " + std::to_string(max_colours));
  }
  std::vector<Bin> cells(1 << 15);
  for (std::size_t i = 0; i < frames.rgb.size(); i += 3) {
    const std::uint8_t* px = &frames.rgb[i];
    Bin& cell = cells[static_cast<std::size_t>(px[0] >> 3) << 10 | (px[1] >> 3) << 5 | px[2] >> 3];
    ++cell.count;
    for (int c = 0; c < 3; ++c) cell.sum[c] += px[c];
  }
  std::vector<Bin> bins;
  for (std::size_t k = 0; k < cells.size(); ++k) {
    for (int c = 0; c < 3; ++c) {
      const auto centre = static_cast<int>(((k >> (10 - 5 * c)) & 31) * 8 + 4);
      const std::uint64_t n = cells[k].count;
      cells[k].mean[c] = n ? static_cast<int>(cells[k].sum[c] / n) : centre;
    }
    if (cells[k].count != 0) bins.push_back(cells[k]);
  }
  ClipPalette palette;
  for (const Box& box : median_cut(bins, static_cast<std::size_t>(max_colours))) {
    std::array<std::uint64_t, 3> sum{};
    std::uint64_t count = 0;
    for (std::size_t i = box.begin; i < box.end; ++i) {
      for (int c = 0; c < 3; ++c) sum[c] += bins[i].sum[c];
      count += bins[i].count;
    }
    // Rounded mean of every pixel in the box.
    std::uint32_t colour = 0;
    for (int c = 0; c < 3; ++c) {
      colour = colour << 8 | static_cast<std::uint32_t>((sum[c] + count / 2) / count);
    }
    palette.colours_.push_back(colour);
  }
  palette.index_.resize(cells.size());
  for (std::size_t k = 0; k < cells.size(); ++k) {
    int best = 0, best_distance = -1;
    for (std::size_t i = 0; i < palette.colours_.size(); ++i) {
      int distance = 0;
      for (int c = 0; c < 3; ++c) {
        const auto level = static_cast<int>((palette.colours_[i] >> (16 - 8 * c)) & 0xff);
        const int d = cells[k].mean[c] - level;
        distance += d * d;
      }
      if (best_distance < 0 || distance < best_distance) {
        best = static_cast<int>(i);
        best_distance = distance;
      }
    }
    palette.index_[k] = static_cast<std::uint8_t>(best);
  }
  return palette;
}

VideoFrames make_test_pattern(int width, int height, int count, double fps, std::uint32_t seed) {
  VideoFrames out = VideoFrames::allocate(width, height, count, fps);
  std::uint64_t state = seed;
  const std::uint64_t colour = splitmix64(state);
  const std::uint64_t phase = splitmix64(state);
  const std::uint8_t square[3] = {static_cast<std::uint8_t>(64 + (colour & 0xbf)),
                                  static_cast<std::uint8_t>(64 + ((colour >> 8) & 0xbf)),
                                  static_cast<std::uint8_t>(64 + ((colour >> 16) & 0xbf))};
  const int side = std::max(1, std::min(width, height) / 4);
  const int span_x = width - side;
  const int span_y = height - side;
  const int step = std::max(1, std::min(width, height) / 16);
  for (int f = 0; f < count; ++f) {
    std::uint8_t* px = out.frame(f);
    const auto blue = static_cast<std::uint8_t>((f * 16 + (phase >> 32)) & 0xff);
    const auto start_x = static_cast<long long>(phase % (2ULL * span_x + 1));
    const auto start_y = static_cast<long long>((phase >> 16) % (2ULL * span_y + 1));
    const int sx = bounce(start_x, 1LL * f * step, span_x);
    const int sy = bounce(start_y, 1LL * f * step, span_y);
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x, px += 3) {
        if (x >= sx && x < sx + side && y >= sy && y < sy + side) {
          std::copy(square, square + 3, px);
        } else {
          px[0] = static_cast<std::uint8_t>(width > 1 ? x * 255 / (width - 1) : 128);
          px[1] = static_cast<std::uint8_t>(height > 1 ? y * 255 / (height - 1) : 128);
          px[2] = blue;
        }
      }
    }
  }
  return out;
}

}  // namespace vgen
