# LibTorch for the worker, from the PyTorch wheel in the project's venv (scripts/setup makes it).
#
# Where Torch is looked for, first match wins:
#   1. -DTorch_DIR=... or a -DCMAKE_PREFIX_PATH that holds a Torch config (your own LibTorch);
#   2. the torch package of ZPIPE_PYTHON (-DZPIPE_PYTHON=/path/to/python, default: the venv's
#      .venv/bin/python): torch.utils.cmake_prefix_path.
#
# Defines zpipe_find_torch(), which every folder that links Torch calls (imported targets are
# directory-scoped). It also moves Torch's include folders behind the system's (-idirafter): the
# wheel's torch/include carries its own, older google/protobuf headers (3.13), and code generated
# by Debian's protoc must see Debian's. Nothing else in torch/include shadows a system header.
set(ZPIPE_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "The Python whose torch package provides LibTorch (and runs the Python tests)")

if(NOT Torch_DIR AND EXISTS "${ZPIPE_PYTHON}")
  execute_process(
    COMMAND "${ZPIPE_PYTHON}" -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path, end='')"
    OUTPUT_VARIABLE ZPIPE_TORCH_PREFIX
    ERROR_VARIABLE ZPIPE_TORCH_ERROR
    RESULT_VARIABLE ZPIPE_TORCH_RC)
  if(ZPIPE_TORCH_RC EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH "${ZPIPE_TORCH_PREFIX}")
  else()
    message(WARNING "ZeroPipe: ${ZPIPE_PYTHON} cannot import torch (${ZPIPE_TORCH_ERROR}); "
                    "run scripts/setup, or pass -DTorch_DIR=<libtorch>/share/cmake/Torch")
  endif()
endif()

macro(zpipe_find_torch)
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    message(FATAL_ERROR
      "ZeroPipe: LibTorch not found. Run scripts/setup (it makes .venv/ with the torch wheel), or "
      "point CMake at a LibTorch 2.x: -DCMAKE_PREFIX_PATH=$(python -c 'import torch.utils; "
      "print(torch.utils.cmake_prefix_path)') or -DTorch_DIR=<libtorch>/share/cmake/Torch")
  endif()
  foreach(zpipe_torch_target torch torch_cpu torch_cuda c10 c10_cuda)
    if(NOT TARGET ${zpipe_torch_target})
      continue()
    endif()
    get_target_property(zpipe_dirs ${zpipe_torch_target} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT zpipe_dirs)
      continue()
    endif()
    set(zpipe_after)
    set(zpipe_keep)
    foreach(zpipe_dir ${zpipe_dirs})
      # Only Torch's own folders move; a CUDA toolkit's include folder stays where it was.
      if(zpipe_dir MATCHES "/torch/include" OR zpipe_dir MATCHES "libtorch/include")
        list(APPEND zpipe_after "SHELL:-idirafter ${zpipe_dir}")
      else()
        list(APPEND zpipe_keep ${zpipe_dir})
      endif()
    endforeach()
    set_target_properties(${zpipe_torch_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${zpipe_keep}")
    set_property(TARGET ${zpipe_torch_target} APPEND PROPERTY INTERFACE_COMPILE_OPTIONS ${zpipe_after})
  endforeach()
endmacro()
