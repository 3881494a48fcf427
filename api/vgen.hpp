// vgen's public API in one include: `#include <vgen/vgen.hpp>` after find_package(vgen).
//   vgen::Runtime      load a model once, submit job specs, get JobHandles (api/engine.hpp)
//   vgen::load_config  strict JSON configs (api/config.hpp)
//   vgen::run_batch    prompt files with verified reruns and a summary (api/batch/batch.hpp)
#pragma once

#include "api/batch/batch.hpp"
#include "api/config.hpp"
#include "api/engine.hpp"
