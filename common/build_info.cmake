# Writes OUTPUT, the build_info_data.cc of common/build_info.h: VERSION (CMake's
# project() version) and the commit SOURCE_DIR is checked out at, with whether
# it has uncommitted changes. Run by the build at every build (cmake -P, from
# common/CMakeLists.txt); the file is rewritten only when its content changes,
# so only a new commit (or a tree turning clean or dirty) recompiles it.
#
# Without git, or when SOURCE_DIR is not the top of a git checkout (a source
# tarball, even one unpacked inside another repository), the commit is
# "unknown".
cmake_minimum_required(VERSION 3.25)  # the policies of the project (CMP0053: @VAR@ only)
set(commit "unknown")
set(dirty "false")
find_program(GIT_EXECUTABLE git)
if(GIT_EXECUTABLE)
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --show-toplevel
                  OUTPUT_VARIABLE top RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    file(REAL_PATH "${top}" top)
    file(REAL_PATH "${SOURCE_DIR}" source)
  endif()
  if(rc EQUAL 0 AND top STREQUAL source)
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                    OUTPUT_VARIABLE sha RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(rc EQUAL 0 AND sha MATCHES "^[0-9a-f]+$")
      set(commit "${sha}")
      # Tracked files only (build trees and scratch files are not the
      # source); --no-optional-locks: a build never takes the index lock
      # from a git command running meanwhile.
      execute_process(COMMAND "${GIT_EXECUTABLE}" --no-optional-locks -C "${SOURCE_DIR}" status --porcelain
                              --untracked-files=no
                      OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
      if(rc EQUAL 0 AND NOT changes STREQUAL "")
        set(dirty "true")
      endif()
    endif()
  endif()
endif()
file(CONFIGURE OUTPUT "${OUTPUT}" @ONLY CONTENT
"// Generated at build time by common/build_info.cmake (common/build_info.h).
namespace hoard::build_info_data {
extern const char kVersion[] = \"@VERSION@\";
extern const char kCommit[] = \"@commit@\";
extern const bool kDirty = @dirty@;
}  // namespace hoard::build_info_data
")
