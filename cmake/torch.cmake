# Finds the torch nansense builds against, and defines the imported target
# `torch` with it (the name TorchConfig.cmake gives its own).
#
# Two sources, the first that applies:
#  1. a LibTorch named explicitly: -DTorch_DIR=<libtorch>/share/cmake/Torch
#     (a LibTorch download, or Debian's libtorch-dev): find_package(Torch).
#  2. the torch of a Python (PyPI's wheel; the default): NANSENSE_PYTHON, or
#     the project's .venv/bin/python, or python3 on PATH. The target is made
#     from the wheel's include and lib folders, as torch.utils.cpp_extension
#     does: a wheel's TorchConfig.cmake looks for a CUDA toolkit, which a CPU
#     build does not need, and this way no other libtorch on the system
#     (Debian's libc10.so) can be picked in its place.
#
# Sets Torch_FOUND, Torch_VERSION (2.15.0), NANSENSE_TORCH_VERSION (what
# torch.__version__ says, 2.15.0+cu132), NANSENSE_TORCH_ROOT (the folder
# holding include/ and lib/), NANSENSE_TORCH_PYTHON (the interpreter, when
# the torch came from Python) and TORCH_LIBRARIES.

set(NANSENSE_CUDA OFF CACHE BOOL
    "Link torch's CUDA libraries (libtorch_cuda) so that C++ programs can use the GPU; off, they link the CPU libraries only")

include(${CMAKE_CURRENT_LIST_DIR}/torch_target.cmake)

# Runs cmake/torch_probe.py with `python`; fills nansense_probe_<key>.
function(nansense_probe_torch python)
  execute_process(COMMAND "${python}" "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/torch_probe.py"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT status EQUAL 0)
    set(nansense_probe_error "${python} failed to run cmake/torch_probe.py: ${err}" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^([a-z0-9_]+)=(.*)$")
      set(nansense_probe_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}" PARENT_SCOPE)
    endif()
  endforeach()
endfunction()

if(Torch_DIR AND NOT NANSENSE_PYTHON_TORCH_ONLY)
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    message(FATAL_ERROR "no LibTorch at Torch_DIR=${Torch_DIR} (it names the folder holding TorchConfig.cmake)")
  endif()
  set(NANSENSE_TORCH_VERSION "${Torch_VERSION}")
  get_filename_component(NANSENSE_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
  set(NANSENSE_TORCH_PYTHON "")
  message(STATUS "nansense: LibTorch ${Torch_VERSION} (Torch_DIR=${Torch_DIR})")
else()
  if(NOT NANSENSE_PYTHON)
    if(Python_EXECUTABLE)  # scikit-build-core names the interpreter it builds for
      set(default_python "${Python_EXECUTABLE}")
    elseif(EXISTS "${PROJECT_SOURCE_DIR}/.venv/bin/python")
      set(default_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
    else()
      find_program(default_python NAMES python3 python)
    endif()
    set(NANSENSE_PYTHON "${default_python}" CACHE FILEPATH "The Python whose torch nansense builds against (and builds its package for)")
  endif()
  nansense_probe_torch("${NANSENSE_PYTHON}")
  if(nansense_probe_error OR NOT nansense_probe_version)
    message(FATAL_ERROR "nansense: no torch to build against: ${nansense_probe_error}\n"
                        "Install PyTorch into that Python (pip install torch; scripts/setup makes .venv/ with it), "
                        "name another with -DNANSENSE_PYTHON=<python>, or a LibTorch with -DTorch_DIR=<libtorch>/share/cmake/Torch.")
  endif()
  set(NANSENSE_TORCH_VERSION "${nansense_probe_version}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+(\\.[0-9]+)?" Torch_VERSION "${nansense_probe_version}")
  set(NANSENSE_TORCH_ROOT "${nansense_probe_root}")
  set(NANSENSE_TORCH_PYTHON "${nansense_probe_python}")
  set(cuda OFF)
  if(NANSENSE_CUDA)
    if(NOT nansense_probe_has_cuda_lib)
      message(FATAL_ERROR "NANSENSE_CUDA=ON, but the torch of ${NANSENSE_PYTHON} (${nansense_probe_version}) has no libtorch_cuda.so")
    endif()
    set(cuda ON)
  endif()
  nansense_torch_target("${nansense_probe_root}" "${nansense_probe_cxx11_abi}" ${cuda})
  set(Torch_FOUND TRUE)
  set(TORCH_LIBRARIES torch)
  set(TORCH_INCLUDE_DIRS "${nansense_probe_root}/include;${nansense_probe_root}/include/torch/csrc/api/include")
  set(TORCH_INSTALL_PREFIX "${nansense_probe_root}")
  set(NANSENSE_TORCH_CXX11_ABI "${nansense_probe_cxx11_abi}")
  set(NANSENSE_TORCH_CUDA ${cuda})
  set(linked "CPU libraries")
  if(cuda)
    set(linked "CPU and CUDA libraries")
  endif()
  message(STATUS "nansense: torch ${nansense_probe_version} of ${NANSENSE_TORCH_PYTHON} (${nansense_probe_root}; ${linked})")
endif()
