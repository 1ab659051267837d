/* libudev's five functions that Debian's static libhwloc.a calls, for builds against it (DDP_HWLOC_PREFIX):
 * udev_new() returns NULL, which hwloc takes as "no udev" and skips the block devices' udev attributes (vendor,
 * model, serial). The binding reads GPUs, NICs, RDMA devices and CPUs only, so its plans are the same; the build
 * needs no libudev, which a GPU machine (a container, a non-Debian distribution) may lack. */
#include <stddef.h>

struct udev;
struct udev_device;

struct udev* udev_new(void) {
  return NULL;  // hwloc: no udev
}
struct udev* udev_unref(struct udev* udev) {
  (void)udev;
  return NULL;
}
struct udev_device* udev_device_new_from_subsystem_sysname(struct udev* udev, const char* subsystem,
                                                           const char* sysname) {
  (void)udev;
  (void)subsystem;
  (void)sysname;
  return NULL;
}
struct udev_device* udev_device_unref(struct udev_device* device) {
  (void)device;
  return NULL;
}
const char* udev_device_get_property_value(struct udev_device* device, const char* key) {
  (void)device;
  (void)key;
  return NULL;
}
