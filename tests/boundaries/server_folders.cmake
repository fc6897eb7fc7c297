cmake_minimum_required(VERSION 3.16)
# Checks the include directions between the folders of server/ (the table in ARCHITECTURE.md,
# "The server's folders"). Run by ctest as
#   cmake -DSOURCE_DIR=<repo> -P server_folders.cmake
# Each folder may include, of the server's headers, its own and those its row allows; the files
# at server/ itself (the Server, main.cc) may include any. Everyone may include the server's
# utility headers at its top: status_util.h, datatype.h, version.h. Fails naming each file and
# include against the table.
set(utilities "status_util\\.h|datatype\\.h|version\\.h")
# folder -> the headers it may include besides its own folder's (regular expressions over the
# path after server/).
set(allowed_observability "")
set(allowed_scheduling "observability/.*|repository/model_config\\.h|repository/repo_file\\.h|runner/infer_request\\.h")
set(allowed_repository "observability/.*|scheduling/.*")
set(allowed_runner "observability/.*|repository/.*|scheduling/.*")
# The protocol adapters: the request path and the protocol-neutral API (server_api.h), never
# each other.
set(allowed_shm "runner/infer_request\\.h")
set(allowed_grpc "observability/.*|repository/.*|scheduling/.*|runner/.*|shm/.*|server_api\\.h")
set(allowed_http "observability/.*|repository/.*|scheduling/.*|runner/.*|shm/.*|server_api\\.h")
# Files that must not include another of their folder ("a b": a includes nothing of b's): the
# OVMS config.json parser is below the registry that reads it.
set(forbidden "repository/ovms_config repository/model_repository")

set(violations "")
set(count 0)
foreach(folder observability scheduling repository runner shm grpc http)
  file(GLOB sources ${SOURCE_DIR}/server/${folder}/*.h ${SOURCE_DIR}/server/${folder}/*.cc)
  if(NOT sources)
    string(APPEND violations "  server/${folder}/: no sources (a folder of the table is gone)\n")
  endif()
  foreach(file IN LISTS sources)
    math(EXPR count "${count} + 1")
    file(STRINGS ${file} includes REGEX "^#include \"server/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"server/([^\"]+)\".*" "\\1" header "${line}")
      if(header MATCHES "^${folder}/" OR header MATCHES "^(${utilities})$")
        continue()
      endif()
      if(NOT "${allowed_${folder}}" STREQUAL "" AND header MATCHES "^(${allowed_${folder}})$")
        continue()
      endif()
      file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
      string(APPEND violations "  ${rel}: server/${header} (${folder}/ may not include it)\n")
    endforeach()
  endforeach()
endforeach()

foreach(pair IN LISTS forbidden)
  string(REPLACE " " ";" pair "${pair}")
  list(GET pair 0 x)
  list(GET pair 1 y)
  foreach(ext h cc)
    if(EXISTS ${SOURCE_DIR}/server/${x}.${ext})
      file(STRINGS ${SOURCE_DIR}/server/${x}.${ext} hits REGEX "^#include \"server/${y}\\.h\"")
      if(hits)
        string(APPEND violations "  server/${x}.${ext}: server/${y}.h (${x} stays below ${y})\n")
      endif()
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "includes against server/'s folder table (ARCHITECTURE.md):\n${violations}")
endif()
message(STATUS "server folders: ${count} files checked")
