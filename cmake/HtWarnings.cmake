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

function(ht_target_defaults target)
  target_link_libraries(${target} PRIVATE ht_defaults)
endfunction()
