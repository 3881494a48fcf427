// The model-family interface's shared helpers: per-row timesteps and a manifest's scheduler
// config as scheduler parameters.
#include "stages/families/family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include "runtime/errors.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

TEST_CASE("a call's timesteps: one per row, a scalar for all rows, anything else refused") {
  std::vector<FamilyJob> members(3);
  std::vector<FamilyJob*> jobs{&members[0], &members[1], &members[2]};
  const auto x = at::zeros({3, 1});
  const std::string device = "cpu";
  const auto per_row = at::tensor({900.0, 500.0, 100.0}, at::kDouble);
  CHECK(at::equal(row_timesteps({jobs, x, per_row, device}), at::tensor({900.0f, 500.0f, 100.0f})));
  const auto scalar = at::scalar_tensor(700.0);
  CHECK(at::equal(row_timesteps({jobs, x, scalar, device}), at::full({3}, 700.0f)));
  const auto two = at::tensor({1.0f, 2.0f});
  CHECK_THROWS_AS(row_timesteps({jobs, x, two, device}), Error);
}

TEST_CASE("a manifest's scheduler config becomes scheduler parameters, kinds kept") {
  const auto config = boost::json::parse(R"({"num_train_timesteps": 1000, "flow_shift": 3.0,
      "use_flow_sigmas": true, "prediction_type": "flow_prediction", "trained_betas": [0.5, 0.25],
      "variance_type": null})").as_object();
  const auto p = scheduler_params_of(config);
  CHECK(p.size() == 6);
  CHECK(std::get<double>(p.at("num_train_timesteps")) == 1000.0);
  CHECK(std::get<double>(p.at("flow_shift")) == 3.0);
  CHECK(std::get<bool>(p.at("use_flow_sigmas")));
  CHECK(std::get<std::string>(p.at("prediction_type")) == "flow_prediction");
  CHECK(std::get<std::vector<double>>(p.at("trained_betas")) == std::vector<double>{0.5, 0.25});
  CHECK(std::holds_alternative<std::monostate>(p.at("variance_type")));
}
