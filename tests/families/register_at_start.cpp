// vgen_test_families: the vgen CLI (apps/vgen, unchanged) with the test-only families too, so
// that Python tests run `render`, `batch` and `serve` on a test family (tests/python/
// test_audio_cli.py: test-echo's tone). The registry is a function-local static
// (stages/families/family.hpp), so adding to it before main() is safe.
namespace vgen {
void register_test_families();  // generated from tests/families/*/ (cmake/family.cmake)
}

namespace {
const bool registered = (vgen::register_test_families(), true);
}
