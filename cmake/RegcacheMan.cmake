# Man pages: docs/man/<page>.3.md (pandoc markdown) built to man3 when
# pandoc is found; the build works without it, and installs none then.  A
# page's NAME line lists every function it documents: each of them gets a
# .so link to the page, so that `man <function>` finds it.  A new page is
# one new file there: the glob finds it.
find_program(PANDOC_EXECUTABLE pandoc)
file(GLOB REGCACHE_MAN_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/man/*.3.md)
if(NOT PANDOC_EXECUTABLE)
  message(STATUS "regcache: pandoc not found: no man pages")
  return()
endif()
set(man_dir ${PROJECT_BINARY_DIR}/man/man3)
file(MAKE_DIRECTORY ${man_dir})
set(man_pages "")
foreach(source ${REGCACHE_MAN_SOURCES})
  get_filename_component(file ${source} NAME)
  string(REGEX REPLACE "\\.md$" "" page ${file})
  add_custom_command(OUTPUT ${man_dir}/${page}
    COMMAND ${PANDOC_EXECUTABLE} -s -t man ${source} -o ${man_dir}/${page}
    DEPENDS ${source} VERBATIM)
  list(APPEND man_pages ${man_dir}/${page})
  # The functions of its NAME line, up to " - ".
  file(READ ${source} text)
  string(REGEX MATCH "# NAME\n+([^\n]*)" _ "${text}")
  string(REGEX REPLACE " - .*" "" names "${CMAKE_MATCH_1}")
  string(REPLACE "," ";" names "${names}")
  foreach(name ${names})
    string(STRIP "${name}" name)
    if(NOT "${name}.3" STREQUAL "${page}")
      file(WRITE ${man_dir}/${name}.3 ".so man3/${page}\n")
      list(APPEND man_pages ${man_dir}/${name}.3)
    endif()
  endforeach()
endforeach()
add_custom_target(regcache_man ALL DEPENDS ${man_pages})
install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
