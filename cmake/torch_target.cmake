# nansense_torch_target(<root> <cxx11 abi 0|1> <cuda ON|OFF>): the imported
# target `torch` from the include and lib folders of a torch wheel (root is
# the torch package folder), as torch.utils.cpp_extension compiles against
# it. Used by the build (cmake/torch.cmake) and by the installed CMake
# package, so that a project linking nansense links the same libtorch.
function(nansense_torch_target root cxx11_abi cuda)
  if(TARGET torch)
    return()
  endif()
  add_library(torch INTERFACE IMPORTED GLOBAL)
  set(libs "${root}/lib/libtorch_cpu.so" "${root}/lib/libc10.so")
  if(cuda)
    # libtorch_cuda registers CUDA with the dispatcher when it is loaded:
    # nothing in nansense refers to it by symbol, so keep the linker from
    # dropping it (TorchConfig.cmake does the same).
    set(libs "-Wl,--no-as-needed" "${root}/lib/libtorch_cuda.so" "${root}/lib/libc10_cuda.so"
             "${root}/lib/libtorch.so" "-Wl,--as-needed" ${libs})
  endif()
  set_target_properties(torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${root}/include;${root}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${cxx11_abi}"
    INTERFACE_LINK_LIBRARIES "${libs}")
endfunction()
