// The browser page `vgen serve` shows at `/` (issue 21): plain HTML/CSS/JS files installed with
// vgen (share/vgen/web; the source tree's web/ in a build tree), served read-only.
//
//   GET /           web_dir/index.html
//   GET /ui/{name}  web_dir/<name>: one file name of [A-Za-z0-9._-], not starting with '.'
// These two need no token: the page holds no data; it asks for the token once and sends it
// as "Authorization: Bearer" on its own API calls (never in a URL).
// Every response carries a Content-Security-Policy that allows only this origin (scripts,
// styles, fetches) plus blob: images and media (previews and the video are fetched with the
// token and shown from blobs), no inline script, no framing; X-Content-Type-Options: nosniff;
// no CORS headers, so other origins cannot read the API from a browser.
//
// Threads: stateless; web_file() reads the file with blocking I/O (a few KiB, like Beast's
// file bodies) and may be called from any thread.
#pragma once

#include "api/http/http_response.hpp"

#include <filesystem>
#include <string_view>

namespace vgen {

// Where the page's files are: $VGEN_WEB_DIR if set (Error(not_found) if it holds no
// index.html), else the first of <exe>/../share/vgen/web (installed) and <source>/web (build
// tree) that holds index.html; an empty path when there is none (the service runs without a page).
std::filesystem::path default_web_dir();

// The file `name` of `web_dir` as a 200 response with its content type and the headers above.
// Error(not_found) for an empty web_dir, a name outside the rule above, or a missing file.
http::StringResponse web_file(const std::filesystem::path& web_dir, std::string_view name);

// The content type for a file name by its extension (application/octet-stream if unknown).
std::string_view web_content_type(std::string_view name);

}  // namespace vgen
