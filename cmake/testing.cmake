# What tests need besides their own component: the tooling Python on an import path of this
# source tree, the parity fixtures (diffusers run once per package, shared by the tests that
# compare against it), and per-test extra libraries and fixtures. Included before stages/ so
# that a component's folder may declare its test's needs next to the component itself.

# --- the tooling packages, as the tests import them -----------------------------------------
# tools/ is one distribution (tools/pyproject.toml) that tools/setup.sh installs into the venv,
# editable. The venv is shared by every checkout on a machine, so its install may name another
# checkout; the tests must exercise this one. So CTest puts ${VGEN_TOOLS_PYTHONPATH} first on
# PYTHONPATH: one link per package, named as pyproject.toml's [tool.setuptools.package-dir]
# maps it (read from that file, so the two cannot disagree).
set(VGEN_TOOLS_PYTHONPATH ${PROJECT_BINARY_DIR}/python)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tools/pyproject.toml)
file(REMOVE_RECURSE ${VGEN_TOOLS_PYTHONPATH})
file(MAKE_DIRECTORY ${VGEN_TOOLS_PYTHONPATH})
file(STRINGS ${PROJECT_SOURCE_DIR}/tools/pyproject.toml vgen_tools_packages REGEX "^vgen_[a-z_]+ = \"[a-z_]+\"$")
if(NOT vgen_tools_packages)
  message(FATAL_ERROR "tools/pyproject.toml: no `vgen_<name> = \"<folder>\"` lines under [tool.setuptools.package-dir]")
endif()
foreach(line IN LISTS vgen_tools_packages)
  string(REGEX MATCH "^(vgen_[a-z_]+) = \"([a-z_]+)\"$" _ "${line}")
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/tools/${CMAKE_MATCH_2} ${VGEN_TOOLS_PYTHONPATH}/${CMAKE_MATCH_1} SYMBOLIC)
endforeach()

# The environment every test runs in: the tooling Python (tests that compare against diffusers
# run it themselves), the source tree, and the tooling packages of this tree.
# Compiled models unpack into the build's own folder, not the user's ~/.cache/vgen/aoti
# (stages/model/aoti_library_cache.hpp).
set(VGEN_TEST_ENVIRONMENT
    "VGEN_PYTHON=${VGEN_PYTHON}" "VGEN_SOURCE_DIR=${PROJECT_SOURCE_DIR}" "PYTHONPATH=${VGEN_TOOLS_PYTHONPATH}"
    "VGEN_AOTI_CACHE=${PROJECT_BINARY_DIR}/aoti-cache")

# --- parity fixtures -----------------------------------------------------------------------
# vgen_parity_fixture(<fixture> <module>): the CTest fixture <fixture>, set up by the test
# stages.<fixture>_reference, which runs `python -m <module> DIR` (a reference generator of
# tools/reference/: it builds a tiny pipeline offline, exports the vgen package and runs
# diffusers on it) into the fresh folder DIR = vgen_parity_dir(<fixture>) and keeps the JSON
# line it prints last as DIR/parity.json (its stdout and stderr stay beside it). A failing
# generator fails the fixture, so the tests that require it are not run on a half-written DIR.
# Tests name the fixture through vgen_test_needs(... FIXTURES <fixture>) and get DIR as
# VGEN_<FIXTURE>_DIR. Nothing is declared without the tooling Python (VGEN_PYTHON).
function(vgen_parity_dir out fixture)
  set(${out} ${PROJECT_BINARY_DIR}/tests/${fixture} PARENT_SCOPE)
endfunction()

function(vgen_parity_fixture fixture module)
  if(NOT VGEN_PYTHON)
    return()
  endif()
  vgen_parity_dir(dir ${fixture})
  add_test(NAME stages.${fixture}_reference
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && '${VGEN_PYTHON}' -m ${module} '${dir}' >'${dir}/stdout.log' 2>'${dir}/stderr.log' && tail -n 1 '${dir}/stdout.log' >'${dir}/parity.json.tmp' && mv '${dir}/parity.json.tmp' '${dir}/parity.json'")
  set_tests_properties(stages.${fixture}_reference PROPERTIES FIXTURES_SETUP ${fixture} TIMEOUT 600 LABELS stages
                       ENVIRONMENT "${VGEN_TEST_ENVIRONMENT}")
endfunction()

# --- what one component's test needs -------------------------------------------------------
# vgen_test_needs(<component> [LIBS lib...] [FIXTURES fixture...] [TIMEOUT seconds]): the test
# of <component> (target test_<component>) links LIBS besides vgen_<component>, and requires the
# parity FIXTURES (each one's folder as VGEN_<FIXTURE>_DIR; without VGEN_PYTHON there are no
# fixtures and the tests skip those cases). Recorded here, applied by vgen_add_test when it
# creates the test (tests/CMakeLists.txt), so it may be called before the test exists, from
# the component's own folder; a component that is not built ignores it.
function(vgen_test_needs component)
  cmake_parse_arguments(arg "" "TIMEOUT" "LIBS;FIXTURES" ${ARGN})
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "vgen_test_needs(${component}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set_property(GLOBAL APPEND PROPERTY vgen_test_libs_${component} ${arg_LIBS})
  set_property(GLOBAL APPEND PROPERTY vgen_test_fixtures_${component} ${arg_FIXTURES})
  if(arg_TIMEOUT)
    set_property(GLOBAL PROPERTY vgen_test_timeout_${component} ${arg_TIMEOUT})
  endif()
endfunction()

# Applies what vgen_test_needs recorded for <component> to its target and its CTest <test>.
function(vgen_apply_test_needs component test)
  get_property(libs GLOBAL PROPERTY vgen_test_libs_${component})
  get_property(fixtures GLOBAL PROPERTY vgen_test_fixtures_${component})
  get_property(timeout GLOBAL PROPERTY vgen_test_timeout_${component})
  if(libs)
    target_link_libraries(test_${component} PRIVATE ${libs})
  endif()
  if(timeout)
    set_tests_properties(${test} PROPERTIES TIMEOUT ${timeout})
  endif()
  if(fixtures AND VGEN_PYTHON)
    set_property(TEST ${test} APPEND PROPERTY FIXTURES_REQUIRED ${fixtures})
    foreach(fixture IN LISTS fixtures)
      vgen_parity_dir(dir ${fixture})
      string(TOUPPER ${fixture} upper)
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT "VGEN_${upper}_DIR=${dir}")
    endforeach()
  endif()
endfunction()
