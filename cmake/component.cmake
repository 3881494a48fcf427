# vgen_library(LIST name [TORCH] [SOURCES ...] [DEPS ...] [LIBS ...] [PRIVATE_LIBS ...]):
# one component = <name>.hpp + <name>.cpp (+ SOURCES) as the static library vgen_<name>,
# recorded in the cache list LIST so that tests/ adds its test_<name>. Skipped when <name>.cpp
# does not exist yet, and for TORCH components in a build without LibTorch.
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
  set(${list} ${${list}} ${name} CACHE INTERNAL "${list}")
endfunction()
