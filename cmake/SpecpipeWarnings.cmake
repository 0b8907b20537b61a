# Project-wide warning and sanitizer flags, applied through an interface target
# so that third-party code is not affected.
add_library(specpipe_flags INTERFACE)
target_compile_options(specpipe_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
target_include_directories(specpipe_flags INTERFACE ${PROJECT_SOURCE_DIR})
if(SPECPIPE_HAVE_CUDA)
  target_compile_definitions(specpipe_flags INTERFACE SPECPIPE_HAVE_CUDA=1)
endif()
if(SPECPIPE_SANITIZE)
  target_compile_options(specpipe_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer>)
  target_link_options(specpipe_flags INTERFACE -fsanitize=address,undefined)
endif()

# specpipe_folder_library(NAME DIR [DEPS...]): one static library per room of
# the tree, from the .cpp files in DIR, DIR/cpu and (with CUDA) the .cu/.cpp files
# in DIR/cuda. Globbing keeps CMake out of the way when a file is added.
function(specpipe_folder_library name dir)
  file(GLOB _srcs CONFIGURE_DEPENDS "${dir}/*.cpp" "${dir}/cpu/*.cpp")
  if(SPECPIPE_HAVE_CUDA)
    file(GLOB _cuda_srcs CONFIGURE_DEPENDS "${dir}/cuda/*.cu" "${dir}/cuda/*.cpp")
    list(APPEND _srcs ${_cuda_srcs})
  endif()
  if(_srcs)
    add_library(${name} STATIC ${_srcs})
    target_link_libraries(${name} PUBLIC specpipe_flags ${ARGN})
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    if(SPECPIPE_HAVE_CUDA)
      target_link_libraries(${name} PUBLIC CUDA::cudart)
      set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    endif()
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE specpipe_flags ${ARGN})
  endif()
endfunction()
