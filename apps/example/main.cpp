// vgen_example: how a backend service embeds vgen. One Runtime (the model loads once), jobs
// submitted as JSON specs, progress through a callback, results through futures, and one
// job cancelled. Usage: vgen_example OUT_DIR [MODEL_DIR]  (no MODEL_DIR: the bundled model).
#include <vgen/vgen.hpp>

#include <boost/json.hpp>

#include <atomic>
#include <iostream>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: vgen_example OUT_DIR [MODEL_DIR]\n";
    return 2;
  }
  try {
    vgen::RuntimeConfig config;
    config.output_dir = argv[1];
    if (argc > 2) config.model = argv[2];
    vgen::Runtime runtime(config);
    std::cout << "model: " << runtime.package().dir.string() << "\n";

    std::atomic<int> steps{0};
    auto on_progress = [&steps](const vgen::JobEvent& e) {
      if (e.state == vgen::JobState::denoise && e.total > 0) ++steps;
    };
    const auto& d = runtime.package().defaults;
    auto spec = [&](const char* prompt, const char* name) {
      return boost::json::object{{"prompt", prompt}, {"name", name}, {"width", d.width}, {"height", d.height},
                                 {"frames", d.frames}, {"steps", 2}};
    };
    auto first = runtime.submit(spec("a red circle moving left", "first"), {.on_progress = on_progress});
    auto second = runtime.submit(spec("a blue square moving up", "second"));
    auto doomed = runtime.submit(spec("a green triangle moving down", "doomed"));
    doomed.cancel();

    int failures = 0;
    for (auto* job : {&first, &second, &doomed}) {
      const vgen::JobResult r = job->future().get();
      std::cout << r.id << " " << vgen::to_string(r.state) << " " << r.output.string() << "\n";
      if (job != &doomed && r.state != vgen::JobState::done) ++failures;
    }
    std::cout << "progress events: " << steps.load() << "\n";
    try {
      runtime.submit(boost::json::object{{"prompt", "x"}, {"width", 250}});
    } catch (const vgen::Error& e) {
      std::cout << "rejected: " << e.what() << " (HTTP " << vgen::http_status_for(e.kind()) << ")\n";
    }
    return failures == 0 && steps.load() > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "vgen_example: " << e.what() << "\n";
    return 1;
  }
}
