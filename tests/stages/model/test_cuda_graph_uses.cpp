#include "stages/model/cuda_graph_uses.hpp"

#include <doctest/doctest.h>

using namespace vgen;

TEST_CASE("cuda_graph_uses counts captures, replays and failures per package, component and device") {
  clear_cuda_graph_uses();
  const CudaGraphSite site{.package = "/p", .component = "transformer", .device = "cuda:0", .file = "/p/transformer.pt"};
  auto other = site;
  other.device = "cuda:1";
  record_cuda_graph_capture(site, "forward", "[1, 16, 3, 4, 4] bfloat16", 12.5);
  record_cuda_graph_replay(site);
  record_cuda_graph_replay(site);
  record_cuda_graph_failure(other, "forward", "[2, 16, 3, 4, 4] bfloat16", "operation not permitted when stream is capturing");
  const auto uses = cuda_graph_uses();
  REQUIRE(uses.size() == 2);
  CHECK(uses[0].device == "cuda:0");
  CHECK(uses[0].component == "transformer");
  CHECK(uses[0].package == "/p");
  CHECK(uses[0].captures == 1);
  CHECK(uses[0].replays == 2);
  CHECK(uses[0].failures == 0);
  CHECK(uses[1].device == "cuda:1");
  CHECK(uses[1].captures == 0);
  CHECK(uses[1].failures == 1);
  clear_cuda_graph_uses();
  CHECK(cuda_graph_uses().empty());
}
