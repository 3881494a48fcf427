// vgen_example: how a backend service embeds vgen, in either of its two forms behind the one
// vgen::JobService interface (api/job_service.hpp):
//   vgen_example OUT_DIR [MODEL_DIR]              a vgen::Runtime in this process (the model loads once;
//                                                 no MODEL_DIR: the bundled model)
//   vgen_example OUT_DIR --queue nats://HOST:PORT a vgen::FleetClient: the jobs run on `vgen worker`s,
//                                                 OUT_DIR is only named in the config (the workers write
//                                                 their outputs to their own --output-dir)
// run_jobs() below knows only JobService: jobs submitted as JSON specs, progress through a
// callback, results through handles, one job cancelled, a bad spec refused with its HTTP status.
// The fleet form is compiled in when vgen was built with libnats (VGEN_EXAMPLE_FLEET).
#include <vgen/vgen.hpp>
#ifdef VGEN_EXAMPLE_FLEET
#include "api/fleet/fleet_client.hpp"
#endif

#include <boost/json.hpp>

#include <atomic>
#include <iostream>
#include <string>

namespace {

boost::json::object spec(const char* prompt, const char* name) {
  // No size or length: the model's defaults apply (the worker's model's, on the fleet).
  return {{"prompt", prompt}, {"name", name}, {"steps", 2}};
}

// Exit code 0 when both kept jobs are done, the refused spec was refused and, if asked, progress was seen.
int run_jobs(vgen::JobService& jobs, bool expect_progress) {
  std::atomic<int> steps{0};
  vgen::SubmitOptions watched;
  watched.on_progress = [&steps](const vgen::JobEvent& e) {
    if (e.status() == "denoise" && e.total > 0) ++steps;
  };
  auto first = jobs.submit(spec("a red circle moving left", "first"), watched);
  auto second = jobs.submit(spec("a blue square moving up", "second"), {});
  auto doomed = jobs.submit(spec("a green triangle moving down", "doomed"), {});
  doomed.cancel();  // it may already have finished: then it stays done

  int failures = 0;
  for (auto* job : {&first, &second, &doomed}) {
    const vgen::JobResult r = job->wait();
    std::cout << r.id << " " << vgen::to_string(r.state) << " " << r.output.string() << "\n";
    if (job != &doomed && r.state != vgen::JobState::done) ++failures;
  }
  std::cout << "progress events: " << steps.load() << "\n";
  try {
    jobs.submit(boost::json::object{{"steps", 2}}, {});  // no prompt
    std::cout << "a spec without a prompt was accepted\n";
    ++failures;
  } catch (const vgen::Error& e) {
    std::cout << "rejected: " << e.what() << " (HTTP " << vgen::http_status_for(e.kind()) << ")\n";
  }
  return failures == 0 && (!expect_progress || steps.load() > 0) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4 || (argc == 4 && std::string(argv[2]) != "--queue")) {
    std::cerr << "usage: vgen_example OUT_DIR [MODEL_DIR]\n       vgen_example OUT_DIR --queue nats://HOST:PORT\n";
    return 2;
  }
  try {
    vgen::RuntimeConfig config;
    config.output_dir = argv[1];
    if (argc == 4) {
#ifdef VGEN_EXAMPLE_FLEET
      config.queue.url = argv[3];
      vgen::FleetClient fleet(config);  // no model here: the workers have it
      std::cout << "fleet: " << config.queue.url << "\n";
      return run_jobs(fleet, /*expect_progress=*/false);  // a fast job's steps may land in one record
#else
      std::cerr << "vgen_example: --queue: this vgen was built without libnats (no fleet client)\n";
      return 2;
#endif
    }
    if (argc == 3) config.model = argv[2];
    vgen::Runtime runtime(config);
    std::cout << "model: " << runtime.package().dir.string() << "\n";
    return run_jobs(runtime, /*expect_progress=*/true);
  } catch (const std::exception& e) {
    std::cerr << "vgen_example: " << e.what() << "\n";
    return 1;
  }
}
