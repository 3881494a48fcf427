// Encode stage throughput: stages/media/encode.hpp encode_to_file (mp4: libx264, veryfast, crf 23,
// yuv420p BT.709, one encoder thread: vgen's defaults) on synthetic frames.
//
//   bench_encode --width W --height H --frames N [--fps F] [--runs R] [--out DIR]
//                [--raw FILE] [--preset P] [--crf C] [--threads T]
//
// The clip is make_test_pattern (deterministic). --raw writes the same frames as packed RGB24
// so that bench/python/encode.py can feed the identical bytes to the ffmpeg CLI. Each run
// encodes to DIR/vgen_WxH.mp4 and is timed alone (frame generation excluded). One JSON object
// on stdout: per-run seconds and frames/s.
#include "stages/media/encode.hpp"
#include "stages/media/frames.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int width = 256, height = 256, frames = 33, runs = 5, crf = 23, threads = 1;
  double fps = 16.0;
  std::string out = "bench/out/encode", raw, preset = "veryfast";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--width") width = std::stoi(v);
    else if (k == "--height") height = std::stoi(v);
    else if (k == "--frames") frames = std::stoi(v);
    else if (k == "--fps") fps = std::stod(v);
    else if (k == "--runs") runs = std::stoi(v);
    else if (k == "--out") out = v;
    else if (k == "--raw") raw = v;
    else if (k == "--preset") preset = v;
    else if (k == "--crf") crf = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
    else {
      std::cerr << "bench_encode: unknown flag " << k << "\n";
      return 2;
    }
  }
  const auto clip = vgen::make_test_pattern(width, height, frames, fps, 7);
  fs::create_directories(out);
  if (!raw.empty()) {
    std::ofstream f(raw, std::ios::binary);
    f.write(reinterpret_cast<const char*>(clip.rgb.data()), static_cast<std::streamsize>(clip.rgb.size()));
  }
  vgen::EncodeOptions options;
  options.format = "mp4";
  options.crf = crf;
  options.preset = preset;
  options.threads = threads;
  const fs::path file = fs::path(out) / ("vgen_" + std::to_string(width) + "x" + std::to_string(height) + ".mp4");
  std::ostringstream secs;
  secs << "[";
  for (int r = 0; r < runs; ++r) {
    const auto t0 = clock_type::now();
    vgen::encode_to_file(clip, file, options);
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    secs << (r ? "," : "") << s;
  }
  secs << "]";
  std::cout << "{\"impl\":\"vgen\",\"width\":" << width << ",\"height\":" << height << ",\"frames\":" << frames
            << ",\"fps\":" << fps << ",\"preset\":\"" << preset << "\",\"crf\":" << crf << ",\"threads\":" << threads
            << ",\"file\":\"" << file.string() << "\",\"bytes\":" << fs::file_size(file) << ",\"seconds\":" << secs.str()
            << "}" << std::endl;
  return 0;
}
