// `vgen serve [--listen HOST:PORT] [--config FILE] [--model DIR] [--device D] [--output-dir DIR]
//             [--token T] [--max-body BYTES] [--job-ttl SECONDS] [--preview-every STEPS] [--print-routes]
//             [--queue nats://HOST:PORT] [--webhook URL [--webhook-secret-file FILE]]`:
// the HTTP API (api/http/http_api.hpp) over one vgen::Runtime, and the page at / (api/http/web_page.hpp;
// its files from default_web_dir(); without them the API runs and / answers 404). Previews
// are on (every RuntimeConfig::kServePreviewEvery steps) unless the config or the flag says.
// With --queue (or the config's queue.url) it serves the fleet (api/fleet/fleet_client.hpp) instead:
// no model loaded, no job state here, the jobs run on `vgen worker`s, and several such front
// ends can stand behind one load balancer. The first line on stdout is
// "listening on http://HOST:PORT" with the real port (port 0 picks a free one). SIGINT or
// SIGTERM stops it gracefully: the server stops accepting and ends its connections, then the
// runtime cancels unfinished jobs; a second signal kills the process at once.
// One batch or service per output directory and journal (runtime/output_lock.hpp): a second
// is refused at start. A non-loopback address without a token starts with a loud warning
// (stderr, whatever the log level): the service would be open to the network without auth.
#include "api/engine.hpp"
#ifdef VGEN_WITH_NATS
#include "api/fleet/fleet_client.hpp"
#endif
#include "api/http/http_api.hpp"
#include "api/http/http_server.hpp"
#include "api/http/web_page.hpp"
#include "apps/vgen/commands.hpp"
#include "apps/vgen/options.hpp"

#include <boost/asio/thread_pool.hpp>
#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <pthread.h>

namespace vgen::cli {

namespace {

struct ServeFlags {
  RuntimeFlags runtime;
  std::string listen, token, queue;
  std::vector<std::string> webhooks;  // --webhook URL, repeatable
  std::string webhook_secret_file;
  std::optional<std::size_t> max_body;
  std::optional<long> job_ttl;
  std::optional<int> preview_every;
  bool print_routes = false;
};

// Where serve writes its videos and journal unless --output-dir or the config's output_dir
// says: $XDG_DATA_HOME/vgen/serve (default ~/.local/share/vgen/serve), never the directory the
// service happened to be started in.
std::filesystem::path default_serve_dir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg == '/') return std::filesystem::path(xdg) / "vgen" / "serve";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".local/share/vgen/serve";
  throw_error(ErrorKind::invalid_argument, "--output-dir: needed (neither XDG_DATA_HOME nor HOME is set for the default)");
}

// --webhook URL: an endpoint for every event type (api/webhooks.hpp), its secret from
// --webhook-secret-file or $VGEN_WEBHOOK_SECRET: never a flag, which any `ps` would show.
void add_webhook_flags(RuntimeConfig& c, const ServeFlags& f) {
  for (const auto& url : f.webhooks) {
    parse_webhook_url(url, "--webhook");
    WebhookEndpoint e{.url = url};
    if (!f.webhook_secret_file.empty()) e.secret_file = f.webhook_secret_file;
    else if (const char* env = std::getenv("VGEN_WEBHOOK_SECRET"); env && *env) e.secret = env;
    else throw_error(ErrorKind::invalid_argument, "--webhook " + url + ": needs a secret (--webhook-secret-file FILE or $VGEN_WEBHOOK_SECRET)");
    c.webhooks.endpoints.push_back(std::move(e));
  }
}

RuntimeConfig serve_config(const ServeFlags& f) {
  auto c = make_config(f.runtime);
  // A config's output_dir is resolved against the config's folder, so "." here means unset.
  if (!f.runtime.output_dir && c.output_dir == ".") c.output_dir = default_serve_dir();
  if (!f.listen.empty()) c.service.listen = f.listen;
  if (!f.token.empty()) c.service.token = f.token;
  if (f.max_body) c.service.max_body_bytes = *f.max_body;
  if (f.job_ttl) c.job_ttl = std::chrono::seconds(*f.job_ttl);
  if (f.preview_every) c.preview_every = *f.preview_every;
  apply_queue_flag(c, f.queue);
  add_webhook_flags(c, f);
  // A service lives on: TorchScript's CUDA fusion pays for its compile (model_backend_options.hpp).
  fuse_when_auto(c.model_backend);
  if (!c.queue.url.empty()) return c;  // the fleet keeps job state in the broker
  if (!c.preview_every) c.preview_every = RuntimeConfig::kServePreviewEvery;  // watching is what a service is for
  default_journal(c, /*resume=*/true);  // accepted jobs survive a crash and resume on restart
  c.overwrite_outputs = false;           // a reused name answers 409, never replaces a finished video
  return c;
}

bool is_loopback(const boost::asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6()).is_loopback();
  return a.is_loopback();
}

void warn_if_open_to_the_network(const http::tcp::endpoint& ep, const std::string& url, const RuntimeConfig& c) {
  if (!c.service.token.empty() || is_loopback(ep.address())) return;
  const auto text = "serve: " + url + " is open to the network WITHOUT authentication: anyone who can reach it can " +
                    "submit, read and cancel jobs. Set --token (or VGEN_TOKEN), or listen on 127.0.0.1.";
  if (spdlog::should_log(spdlog::level::warn)) spdlog::warn("{}", text);
  else std::cerr << "vgen: WARNING: " << text << std::endl;  // the log is quieter than warn: say it anyway
}

std::string url_of(const http::tcp::endpoint& ep) {
  const auto host = ep.address().to_string();
  return "http://" + (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

// Serves `jobs` until SIGINT/SIGTERM, then stops the server and its connections.
void serve_until_signal(JobService& jobs, boost::asio::any_io_executor executor, const RuntimeConfig& config,
                        sigset_t& stop_signals) {
  spdlog::info("serve: config {}", boost::json::serialize(to_json(config)));
  http::ServerOptions options;
  options.listen = config.service.listen;
  options.max_body_bytes = config.service.max_body_bytes;
  options.max_connections = config.service.max_connections;
  const auto web_dir = default_web_dir();
  if (web_dir.empty()) spdlog::warn("serve: the web page's files were not found (set VGEN_WEB_DIR): / answers 404");
  else spdlog::info("serve: the web page from {}", web_dir.string());
  http::HttpServer server(executor, std::make_shared<HttpApi>(jobs, web_dir), options);
  const auto endpoint = server.listen();
  warn_if_open_to_the_network(endpoint, url_of(endpoint), config);
  server.start();
  std::cout << "listening on " << url_of(endpoint) << std::endl;

  int signal = 0;
  sigwait(&stop_signals, &signal);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);  // a second signal ends the process
  spdlog::warn("serve: {} received, shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
  server.stop();
  server.join();
}

int run_serve(const ServeFlags& f) {
  if (f.print_routes) {
    for (const auto& r : HttpApi::routes()) std::cout << r.method << " " << r.path << "\n";
    return 0;
  }
  auto config = serve_config(f);
  http::parse_listen_address(config.service.listen);  // a bad address fails before the model loads
  const bool fleet = !config.queue.url.empty();
  if (!fleet) config.exclusive_output = true;  // a second batch or serve on this directory is refused

  auto stop_signals = block_stop_signals();  // before any thread starts: this thread alone takes them

  if (fleet) {
#ifdef VGEN_WITH_NATS
    FleetClient client(config);
    boost::asio::thread_pool io(std::max<std::size_t>(2, config.io_threads));
    serve_until_signal(client, io.get_executor(), config, stop_signals);
    io.join();
    return 0;
#else
    throw_error(ErrorKind::invalid_argument, "--queue: this vgen was built without libnats-dev (no fleet support)");
#endif
  }
  Runtime runtime(config);
  spdlog::info("serve: videos and the journal go to {}", std::filesystem::absolute(config.output_dir).string());
  serve_until_signal(runtime, runtime.executor(), config, stop_signals);
  runtime.shutdown();
  return 0;
}

}  // namespace

Run add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the HTTP API (jobs, progress events, videos, metrics)");
  auto f = std::make_shared<ServeFlags>();
  add_runtime_flags(*cmd, f->runtime);
  cmd->add_option("--output-dir", f->runtime.output_dir, "directory the videos and the journal are written to (default: config, else $XDG_DATA_HOME/vgen/serve, i.e. ~/.local/share/vgen/serve)");
  cmd->add_option("--listen", f->listen, "HOST:PORT to listen on; port 0 picks a free port (default: config, else 127.0.0.1:8080)");
  cmd->add_option("--token", f->token, "require 'Authorization: Bearer TOKEN' on every route but /healthz")->envname("VGEN_TOKEN");
  cmd->add_option("--max-body", f->max_body, "largest request body in bytes (413 beyond)")->check(CLI::Range(64, 64 << 20));
  cmd->add_option("--job-ttl", f->job_ttl, "seconds a finished job stays queryable")->check(CLI::Range(1L, 365L * 86400));
  cmd->add_option("--preview-every", f->preview_every, "a preview image every N denoising steps; 0: none (default: config, else 2)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--queue", f->queue, "serve the fleet on this NATS broker (nats://HOST:PORT): jobs run on `vgen worker`s");
  cmd->add_option("--webhook", f->webhooks, "send signed job-end events (video.completed|failed|cancelled) to this http:// URL; repeatable");
  cmd->add_option("--webhook-secret-file", f->webhook_secret_file, "the webhooks' whsec_ secret (default: $VGEN_WEBHOOK_SECRET)");
  cmd->add_flag("--print-routes", f->print_routes, "print the API's routes (METHOD PATH) and exit");
  return [f] { return run_serve(*f); };
}

}  // namespace vgen::cli
