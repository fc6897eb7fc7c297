# Checks that the code outside the engine includes only the engine's public face: engine/engine.h,
# the value types of engine/tensor/, the status macros of engine/base/ and (for tools and
# benchmarks) the looprun helpers of engine/tools/. Run by ctest as
#   cmake -DSOURCE_DIR=<repo> -P engine_face.cmake
# Fails naming each file and include that reaches into the engine's internals (IR, transforms,
# runtime, kernels, importers).
file(GLOB_RECURSE sources
  ${SOURCE_DIR}/server/*.h ${SOURCE_DIR}/server/*.cc
  ${SOURCE_DIR}/client/*.h ${SOURCE_DIR}/client/*.cc
  ${SOURCE_DIR}/bench/*.h ${SOURCE_DIR}/bench/*.cc
  ${SOURCE_DIR}/engine/tools/*.h ${SOURCE_DIR}/engine/tools/*.cc)
set(violations "")
foreach(file IN LISTS sources)
  file(STRINGS ${file} includes REGEX "^#include \"engine/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
    if(NOT header MATCHES "^engine/(engine\\.h|tensor/[a-z_]+\\.h|base/[a-z_]+\\.h|tools/[a-z_]+\\.h)$")
      file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
      string(APPEND violations "  ${rel}: ${header}\n")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "includes past the engine's public face (engine/engine.h):\n${violations}")
endif()
list(LENGTH sources count)
message(STATUS "engine face: ${count} files checked")
