# Python models (worker/python): CPython embedded in the worker, from the installation of
# ZPIPE_PYTHON (the venv whose torch wheel is the worker's LibTorch, cmake/torch.cmake), found
# through that interpreter's own sysconfig: LIBDIR/LDLIBRARY for libpython (never a fixed path:
# pyenv, Debian 12's python3.11 and others put it elsewhere) and INCLUDEPY for Python.h; torch's
# libtorch_python lies beside the LibTorch libraries. Sets:
#   ZPIPE_WITH_PYTHON           ON when a shared libpython and libtorch_python were found
#   ZPIPE_PYTHON_LIBRARY, ZPIPE_PYTHON_INCLUDE_DIR, ZPIPE_TORCH_PYTHON_LIBRARY
# Without them the worker builds without Python models and refuses such jobs saying why.
set(ZPIPE_WITH_PYTHON OFF)
if(NOT EXISTS "${ZPIPE_PYTHON}")
  message(WARNING "ZeroPipe: no Python at ${ZPIPE_PYTHON}: workers are built without Python models")
  return()
endif()
execute_process(
  COMMAND "${ZPIPE_PYTHON}" -c
          "import sysconfig as s; v = s.get_config_var; print(v('LIBDIR') or ''); print(v('LIBPL') or ''); print(v('MULTIARCH') or ''); print(v('LDLIBRARY') or ''); print(v('INCLUDEPY') or '')"
  OUTPUT_VARIABLE zpipe_sysconfig
  RESULT_VARIABLE zpipe_sysconfig_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT zpipe_sysconfig_rc EQUAL 0)
  message(WARNING "ZeroPipe: ${ZPIPE_PYTHON} cannot report its sysconfig: workers are built "
                  "without Python models")
  return()
endif()
string(REPLACE "\n" ";" zpipe_sysconfig "${zpipe_sysconfig}")
list(GET zpipe_sysconfig 0 zpipe_py_libdir)
list(GET zpipe_sysconfig 1 zpipe_py_libpl)
list(GET zpipe_sysconfig 2 zpipe_py_multiarch)
list(GET zpipe_sysconfig 3 zpipe_py_ldlibrary)
list(GET zpipe_sysconfig 4 zpipe_py_include)
unset(ZPIPE_PYTHON_LIBRARY CACHE)
if(zpipe_py_ldlibrary MATCHES "\\.so")
  find_library(ZPIPE_PYTHON_LIBRARY NAMES ${zpipe_py_ldlibrary}
               PATHS ${zpipe_py_libdir} ${zpipe_py_libdir}/${zpipe_py_multiarch} ${zpipe_py_libpl}
               NO_DEFAULT_PATH)
endif()
find_library(ZPIPE_TORCH_PYTHON_LIBRARY torch_python PATHS "${TORCH_INSTALL_PREFIX}/lib"
             NO_DEFAULT_PATH)
if(NOT ZPIPE_PYTHON_LIBRARY OR NOT EXISTS "${zpipe_py_include}/Python.h")
  message(WARNING "ZeroPipe: ${ZPIPE_PYTHON} has no shared libpython ('${zpipe_py_ldlibrary}' in "
                  "${zpipe_py_libdir}) or no Python.h (${zpipe_py_include}): workers are built "
                  "without Python models. Use a Python built with --enable-shared (pyenv: "
                  "PYTHON_CONFIGURE_OPTS=--enable-shared), or Debian's with libpython3.11-dev.")
  return()
endif()
if(NOT ZPIPE_TORCH_PYTHON_LIBRARY)
  message(WARNING "ZeroPipe: no libtorch_python in ${TORCH_INSTALL_PREFIX}/lib (a LibTorch not "
                  "from a torch wheel): workers are built without Python models")
  return()
endif()
set(ZPIPE_PYTHON_INCLUDE_DIR "${zpipe_py_include}")
set(ZPIPE_WITH_PYTHON ON)
message(STATUS "ZeroPipe: Python models ON (${ZPIPE_PYTHON_LIBRARY})")
