// Stills of a finished video, made with libav: a thumbnail (one frame as PNG) and a
// spritesheet (a grid of evenly spaced frames as JPEG), as OpenAI's videos API serves them
// (GET /v1/videos/{id}/content?variant=thumbnail|spritesheet, api/http/openai_videos.hpp).
//
// The video is decoded twice: once to count its frames (probe_video), once to keep the frames
// the still needs; nothing else of it stays in memory. The image is written through
// runtime/atomic_file, so a reader never sees half of it and a crash leaves no partial still.
// Errors: Error(invalid_argument, "<path>: ...") for a missing, corrupt or frameless video
// (probe_video), Error(internal/transient) from libav or the write.
// Blocking: decodes the whole file and writes the image on the calling thread (run it off an
// io thread). Thread-safety: independent calls may run concurrently. Cancellation: none.
#pragma once

#include <filesystem>
#include <string>

namespace vgen {

// The frame a thumbnail shows, of `frames` (>= 1): the middle one (the first is often a fade-in
// or the bare input image of an image-to-video job).
int thumbnail_frame(int frames);

// Writes the thumbnail of `video` (a file encode_to_file wrote) to `target` as PNG, at the
// video's own size.
void write_thumbnail(const std::filesystem::path& video, const std::filesystem::path& target);

struct SpritesheetLayout {
  int columns = 0, rows = 0;           // the grid; tiles fill it row by row
  int tile_width = 0, tile_height = 0;  // even, the video's aspect kept
  int tiles = 0;                        // <= columns * rows
};
// The grid for a video of `frames` frames of width x height: up to max_tiles frames (5 x 5),
// columns = ceil(sqrt(tiles)), tiles at most max_tile_width wide.
SpritesheetLayout spritesheet_layout(int frames, int width, int height, int max_tiles = 25, int max_tile_width = 256);
// Frame index of tile `tile` of `layout`, evenly spaced over `frames` from the first to the last.
int spritesheet_frame(const SpritesheetLayout& layout, int frames, int tile);

// Writes the spritesheet of `video` to `target` as JPEG (spritesheet_layout; empty tiles black).
void write_spritesheet(const std::filesystem::path& video, const std::filesystem::path& target);

}  // namespace vgen
