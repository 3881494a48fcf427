# vgen_library(LIST name [TORCH] [SOURCES ...] [DEPS ...] [LIBS ...] [PRIVATE_LIBS ...]):
# one component = <name>.hpp + <name>.cpp (+ SOURCES) in the current folder, as the static
# library vgen_<name>. It is recorded in the cache list LIST and, with its folder, in
# VGEN_COMPONENTS ("<folder>:<name>", the folder relative to the source root) so that tests/
# adds tests/<folder>/test_<name>.cpp. Skipped when <name>.cpp does not exist yet, and for
# TORCH components in a build without LibTorch.
set(VGEN_COMPONENTS "" CACHE INTERNAL "every component as <folder>:<name>")

function(vgen_record_component list name)
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  set(${list} ${${list}} ${name} CACHE INTERNAL "${list}")
  set(VGEN_COMPONENTS ${VGEN_COMPONENTS} "${folder}:${name}" CACHE INTERNAL "every component as <folder>:<name>")
endfunction()

function(vgen_library list name)
  cmake_parse_arguments(ARG "TORCH" "" "DEPS;LIBS;PRIVATE_LIBS;SOURCES" ${ARGN})
  if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${name}.cpp)
    return()
  endif()
  if(ARG_TORCH AND NOT VGEN_WITH_TORCH)
    return()
  endif()
  add_library(vgen_${name} STATIC ${name}.cpp ${ARG_SOURCES})
  target_include_directories(vgen_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<INSTALL_INTERFACE:include/vgen>)
  target_link_libraries(vgen_${name} PUBLIC ${ARG_DEPS} ${ARG_LIBS} PRIVATE ${ARG_PRIVATE_LIBS})
  vgen_record_component(${list} ${name})
endfunction()

# The wrappers each top folder uses (stages/ and api/ with their subfolders).
function(vgen_stage name)
  vgen_library(VGEN_STAGE_COMPONENTS ${name} ${ARGN})
endfunction()
function(vgen_api name)
  vgen_library(VGEN_API_COMPONENTS ${name} ${ARGN})
endfunction()
