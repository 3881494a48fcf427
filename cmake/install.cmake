# Installs the libraries, headers, the vgen executable, the bundled model and a CMake package
# (lib/cmake/vgen) so that another project does find_package(vgen) and links vgen::vgen.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_components ${VGEN_RUNTIME_COMPONENTS} ${VGEN_STAGE_COMPONENTS} ${VGEN_API_COMPONENTS})
list(REMOVE_DUPLICATES _components)
list(TRANSFORM _components PREPEND vgen_ OUTPUT_VARIABLE _targets)

# vgen::vgen: the embedding API (api/vgen.hpp) and everything under it.
add_library(vgen_all INTERFACE)
set_target_properties(vgen_all PROPERTIES EXPORT_NAME vgen)
target_include_directories(vgen_all INTERFACE $<INSTALL_INTERFACE:include>)
target_link_libraries(vgen_all INTERFACE vgen_runtime)
if(TARGET vgen_batch)
  target_link_libraries(vgen_all INTERFACE vgen_engine vgen_batch)
  # The DT_NEEDED order that keeps libtorch's std::filesystem and protobuf out (see the
  # top-level CMakeLists.txt): consumers' executables need it as much as ours.
  target_link_options(vgen_all INTERFACE "LINKER:--push-state,--no-as-needed" -lstdc++ -lsentencepiece "LINKER:--pop-state")
endif()
add_library(vgen::vgen ALIAS vgen_all)

install(TARGETS ${_targets} vgen_runtime vgen_all EXPORT vgenTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS vgen RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir runtime stages api)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/vgen/${dir}
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/api/vgen.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/vgen)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/vgen/configs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/web/ DESTINATION ${CMAKE_INSTALL_DATADIR}/vgen/web)  # the page at / (vgen serve)
if(EXISTS ${PROJECT_SOURCE_DIR}/models/vgen-shapes/manifest.json)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/vgen-shapes DESTINATION ${CMAKE_INSTALL_DATADIR}/vgen/models)
endif()

install(EXPORT vgenTargets NAMESPACE vgen:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vgen)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/vgenConfig.cmake.in
  ${PROJECT_BINARY_DIR}/vgenConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vgen)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/vgenConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/vgenConfig.cmake ${PROJECT_BINARY_DIR}/vgenConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vgen)
