# mdl_generate(TARGET <target> SPECS <spec.mdl>... BACKENDS <backend>...
#              [OUTPUT_DIR <dir>] [IMPORT_DIRS <dir>...])
#
# Generates C++ for each spec and backend during the build (like
# protobuf_generate): <spec>_<backend>.h and .cpp in OUTPUT_DIR (default:
# <binary dir>/mdl_generated), in namespace mdl::gen::<model>::<backend>.
# The sources are added to <target> (the .cpp files compiled with
# -fexceptions, CMake 3.18 or newer), which gets the output directory on its
# include path and links the MDL runtime. Files are regenerated when a spec
# or anything it imports changes.
#
# MDL_MDLC_EXECUTABLE names the compiler (set by find_package(MDL), or by
# the MDL build itself).
function(mdl_generate)
  cmake_parse_arguments(ARG "" "TARGET;OUTPUT_DIR" "SPECS;BACKENDS;IMPORT_DIRS"
                        ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_SPECS OR NOT ARG_BACKENDS)
    message(FATAL_ERROR "mdl_generate needs TARGET, SPECS and BACKENDS")
  endif()
  if(CMAKE_VERSION VERSION_LESS 3.18)
    message(FATAL_ERROR "mdl_generate needs CMake 3.18 or newer")
  endif()
  if(NOT MDL_MDLC_EXECUTABLE)
    message(FATAL_ERROR "mdl_generate: MDL_MDLC_EXECUTABLE is not set; "
                        "use find_package(MDL)")
  endif()
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}/mdl_generated")
  endif()
  set(includes)
  foreach(dir IN LISTS ARG_IMPORT_DIRS)
    list(APPEND includes -I "${dir}")
  endforeach()
  set(sources)
  set(units)
  foreach(spec IN LISTS ARG_SPECS)
    get_filename_component(spec "${spec}" ABSOLUTE)
    get_filename_component(stem "${spec}" NAME_WE)
    foreach(backend IN LISTS ARG_BACKENDS)
      string(REPLACE "-" "_" backend "${backend}")
      set(out "${ARG_OUTPUT_DIR}/${stem}_${backend}")
      add_custom_command(
        OUTPUT "${out}.h" "${out}.cpp"
        COMMAND ${MDL_MDLC_EXECUTABLE} emit "${spec}" --backend ${backend}
                -o "${ARG_OUTPUT_DIR}" --depfile "${out}.d" ${includes}
        DEPENDS "${spec}" ${MDL_MDLC_EXECUTABLE}
        DEPFILE "${out}.d"
        COMMENT "Generating C++ for ${stem} on ${backend}"
        VERBATIM)
      list(APPEND sources "${out}.cpp" "${out}.h")
      list(APPEND units "${out}.cpp")
    endforeach()
  endforeach()
  target_sources(${ARG_TARGET} PRIVATE ${sources})
  target_include_directories(${ARG_TARGET} PUBLIC "${ARG_OUTPUT_DIR}")
  target_link_libraries(${ARG_TARGET} PUBLIC MDL::Runtime)
  # Errors in generated expressions are exceptions that the runtime throws
  # and catches: they unwind through the generated code, which must clean
  # up its values on the way. The rest of the target may do without.
  set_property(SOURCE ${units} TARGET_DIRECTORY ${ARG_TARGET}
               APPEND PROPERTY COMPILE_OPTIONS -fexceptions)
endfunction()
