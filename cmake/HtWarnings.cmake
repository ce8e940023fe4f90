# Project-wide warning and sanitizer flags, applied per target through ht_target_defaults().
add_library(ht_defaults INTERFACE)
target_compile_options(ht_defaults INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>
  # GCC 12 reports impossible std::string copies at -O3 (bogus -Wrestrict, GCC bug 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>)
if(HT_WERROR)
  target_compile_options(ht_defaults INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(HT_SANITIZE)
  target_compile_options(ht_defaults INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(ht_defaults INTERFACE -fsanitize=address,undefined)
endif()

# Shared libraries: calls inside a library bind inside it, as in a static build (no symbol of ours
# is interposed), and a library names every library it needs (no undefined symbol left for the
# executable to supply; the sanitizers' runtimes are the executable's, so not under HT_SANITIZE).
if(BUILD_SHARED_LIBS)
  target_compile_options(ht_defaults INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
  if(NOT HT_SANITIZE)
    target_link_options(ht_defaults INTERFACE
      $<$<OR:$<STREQUAL:$<TARGET_PROPERTY:TYPE>,SHARED_LIBRARY>,$<STREQUAL:$<TARGET_PROPERTY:TYPE>,MODULE_LIBRARY>>:LINKER:--no-undefined>)
  endif()
endif()

function(ht_target_defaults target)
  target_link_libraries(${target} PRIVATE ht_defaults)
endfunction()
