# Debian packages through CPack, one per component, like other SPANK plugins ship:
#   slurm-ddp-plugin   ddp.so and its plugstack.conf.d snippet (a conffile), tied to the Slurm series built against
#   slurm-ddp-tools    ddp-topo, ddp-doctor, ddp-train and the sbatch templates
#   slurm-ddp-dev      the runtime's C++ API: headers, static library, CMake package (find_package(SlurmDDP))
# Build with: cpack -G DEB --config build/CPackConfig.cmake
# Licence: BSD-3-Clause (LICENSE), installed as each package's /usr/share/doc/<package>/copyright.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME slurm-ddp)
set(CPACK_PACKAGE_VENDOR "slurm-ddp")
set(CPACK_PACKAGE_CONTACT "slurm-ddp maintainers <maintainers@slurm-ddp.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "PyTorch distributed training on Slurm: srun --ddp")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_COMPONENTS_ALL plugin tools)
if(TARGET ddp_runtime)
  list(APPEND CPACK_COMPONENTS_ALL dev)
endif()

set(CPACK_DEBIAN_PLUGIN_PACKAGE_NAME slurm-ddp-plugin)
set(CPACK_DEBIAN_PLUGIN_DESCRIPTION "SPANK plugin adding srun --ddp (torchrun's environment for every task)")
if(DDP_SLURM_SERIES)
  # Slurm loads a plugin only when built for its own release series.
  set(CPACK_DEBIAN_PLUGIN_PACKAGE_DEPENDS
      "slurm-wlm-basic-plugins (>= ${DDP_SLURM_SERIES}), slurm-wlm-basic-plugins (<< ${DDP_SLURM_NEXT_SERIES})")
endif()
if(NOT DDP_PLUGSTACK_FILE)
  set(DDP_PLUGSTACK_FILE zz-ddp.conf)
endif()
set(_conffiles ${CMAKE_BINARY_DIR}/packaging/conffiles)
file(WRITE ${_conffiles} "${DDP_PLUGSTACK_DIR}/${DDP_PLUGSTACK_FILE}\n")
# Earlier packages installed the snippet as ddp.conf, which Slurm reads before pyxis.conf: dpkg moves it, with the
# admin's edits, to its new name (dpkg-maintscript-helper(1), called alike from all three scripts).
set(CPACK_DEBIAN_PLUGIN_PACKAGE_CONTROL_EXTRA ${_conffiles})
# The maintainer scripts are written with the plugin (spank_plugin/*inst.in, postrm.in).
if(EXISTS ${CMAKE_BINARY_DIR}/packaging/postrm)
  foreach(_script preinst postinst postrm)
    list(APPEND CPACK_DEBIAN_PLUGIN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/${_script})
  endforeach()
endif()
set(CPACK_DEBIAN_PLUGIN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
foreach(_component plugin tools)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/slurm-ddp-${_component}
          RENAME copyright COMPONENT ${_component})
endforeach()

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME slurm-ddp-tools)
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "ddp-topo, ddp-doctor, ddp-train and sbatch templates for slurm-ddp")
# nettle is loaded at run time (base/hmac.hpp), so shlibdeps does not see it; Debian 13 renamed its package (64-bit
# time_t).
set(_nettle "libnettle8 | libnettle8t64")
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${_nettle}")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME slurm-ddp-dev)
set(CPACK_DEBIAN_DEV_DESCRIPTION "C++ API of the slurm-ddp runtime: train your own LibTorch model with ddp-train's loop")
set(_dev_depends "libtorch-dev, zlib1g-dev, ${_nettle}")
if(DDP_RUNTIME_WITH_MPI)
  string(APPEND _dev_depends ", libopenmpi-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_dev_depends}")

include(CPack)
