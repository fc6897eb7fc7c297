cmake_minimum_required(VERSION 3.16)
# Checks that every path ARCHITECTURE.md names exists, so the page cannot keep describing files
# that moved. Run by ctest as
#   cmake -DSOURCE_DIR=<repo> -P doc_paths.cmake
# A path is a word that starts at one of the repository's top folders (server/runner/..., the
# code blocks included), or a `quoted` word with a '/' in it (`dnnl/recurrent.cc`, `control/`),
# which must then name a file or folder somewhere below the top folders (a path relative to the
# section's folder; a file's stem names its .h and .cc). `a.{h,cc}` names both files. ../shared/ paths are checked when the shared
# folder is there. Fails listing each path that names nothing.
set(doc ${SOURCE_DIR}/ARCHITECTURE.md)
set(tops engine server tests bench client deploy proto tools)
file(READ ${doc} text)

string(REPLACE ";" "|" tops_re "${tops}")
string(REGEX MATCHALL "(^|[^A-Za-z0-9_./-])(${tops_re})/[A-Za-z0-9_./{},-]*" rooted "${text}")
string(REGEX MATCHALL "`[^` ]+`" quoted "${text}")

# Every file and folder below the top folders, as "/<path>" for suffix matching.
set(globs "")
foreach(top IN LISTS tops)
  list(APPEND globs ${SOURCE_DIR}/${top}/*)
endforeach()
file(GLOB_RECURSE tree LIST_DIRECTORIES true RELATIVE ${SOURCE_DIR} ${globs})
list(TRANSFORM tree PREPEND "/")
string(REPLACE ";" "\n" tree_text "\n${tree}\n")

set(missing "")
set(count 0)
# kind: rooted (from the repository root) or quoted (anywhere below a top folder).
foreach(kind rooted quoted)
  foreach(word IN LISTS ${kind})
    string(REGEX REPLACE "^[^A-Za-z0-9_.`/-]" "" word "${word}")
    string(REPLACE "`" "" word "${word}")
    string(REGEX REPLACE "[.,:)]+$" "" word "${word}")
    if(kind STREQUAL "quoted")
      # Words with a '/' that are paths: no URLs, options, patterns or rooted ones (done above).
      if(NOT word MATCHES "/" OR word MATCHES "[:<>*=@$()]|^-|^/|/-"
         OR word MATCHES "^(${tops_re})/" OR word MATCHES "^[^/]*[^A-Za-z0-9_./{},-]")
        continue()
      endif()
    endif()
    if(word MATCHES "^\\.\\./shared/" AND NOT EXISTS ${SOURCE_DIR}/../shared)
      continue()
    endif()
    # a.{h,cc} -> a.h a.cc
    set(paths "${word}")
    if(word MATCHES "^([^{]*)\\{([^}]*)\\}(.*)$")
      set(head "${CMAKE_MATCH_1}")
      set(tail "${CMAKE_MATCH_3}")
      string(REPLACE "," ";" alternatives "${CMAKE_MATCH_2}")
      set(paths "")
      foreach(alternative IN LISTS alternatives)
        list(APPEND paths "${head}${alternative}${tail}")
      endforeach()
    endif()
    foreach(path IN LISTS paths)
      string(REGEX REPLACE "/$" "" path "${path}")
      math(EXPR count "${count} + 1")
      if(EXISTS ${SOURCE_DIR}/${path})
        continue()
      endif()
      if(kind STREQUAL "quoted")
        # A file, a folder, or a file's stem (`native/packed_gemv` for its .h and .cc).
        string(FIND "${tree_text}" "/${path}\n" at)
        string(FIND "${tree_text}" "/${path}." stem)
        if(NOT at EQUAL -1 OR NOT stem EQUAL -1)
          continue()
        endif()
      endif()
      string(APPEND missing "  ${path}\n")
    endforeach()
  endforeach()
endforeach()
if(missing)
  message(FATAL_ERROR "ARCHITECTURE.md names paths that do not exist:\n${missing}")
endif()
message(STATUS "ARCHITECTURE.md: ${count} paths checked")
