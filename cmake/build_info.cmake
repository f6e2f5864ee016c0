# zpipe::build_info: the generated header zpipe/build_info.h with what this build is made of
# (project version, git commit, the LibTorch and CUDA versions of ZPIPE_PYTHON's torch), as
# `zpipe version` and the coordinator's zpipe_build_info metric report them. The values are
# read when CMake configures: a commit made after that shows once CMake runs again.
set(ZPIPE_BUILD_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${PROJECT_SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --short=12 HEAD
                  WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
                  OUTPUT_VARIABLE zpipe_commit OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE zpipe_commit_rc ERROR_QUIET)
  if(zpipe_commit_rc EQUAL 0 AND zpipe_commit)
    set(ZPIPE_BUILD_COMMIT "${zpipe_commit}")
  endif()
endif()

# "" when unknown (no Python with torch, or a LibTorch given by Torch_DIR alone).
set(ZPIPE_BUILD_TORCH "")
set(ZPIPE_BUILD_CUDA "")
if(EXISTS "${ZPIPE_PYTHON}")
  execute_process(
    COMMAND "${ZPIPE_PYTHON}" -c
            "import torch; print(torch.__version__); print(torch.version.cuda or '')"
    OUTPUT_VARIABLE zpipe_torch_versions OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE zpipe_torch_rc ERROR_QUIET)
  if(zpipe_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" zpipe_torch_versions "${zpipe_torch_versions}")
    list(LENGTH zpipe_torch_versions zpipe_n)
    list(GET zpipe_torch_versions 0 ZPIPE_BUILD_TORCH)
    if(zpipe_n GREATER 1)
      list(GET zpipe_torch_versions 1 ZPIPE_BUILD_CUDA)
    endif()
  endif()
endif()

configure_file("${PROJECT_SOURCE_DIR}/cmake/build_info.h.in"
               "${PROJECT_BINARY_DIR}/generated/zpipe/build_info.h" @ONLY)
add_library(zpipe_build_info INTERFACE)
add_library(zpipe::build_info ALIAS zpipe_build_info)
target_include_directories(zpipe_build_info INTERFACE "${PROJECT_BINARY_DIR}/generated")
