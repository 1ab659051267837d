/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1 with the entry points ddp-doctor loads: two H100s,
 * the second with 20 GiB already in use. FAKE_NVML_INIT_ERROR=N makes nvmlInit fail with code N, the way a
 * node whose kernel module is not loaded answers (9: NVML_ERROR_DRIVER_NOT_LOADED). */
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} FakeMemory;

static const unsigned kGpus = 2;
static const unsigned long long kGiB = 1ull << 30;

int nvmlInit_v2(void) {
  const char* error = getenv("FAKE_NVML_INIT_ERROR");
  return error ? atoi(error) : 0;
}

int nvmlShutdown(void) { return 0; }

const char* nvmlErrorString(int code) { return code == 9 ? "Driver Not Loaded" : "Unknown Error"; }

int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  strncpy(version, "550.54.15", length);
  return 0;
}

int nvmlSystemGetCudaDriverVersion(int* version) {
  *version = 12040;
  return 0;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = kGpus;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= kGpus) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = (void*)(unsigned long)(index + 1);
  return 0;
}

int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  (void)device;
  strncpy(name, "NVIDIA H100 80GB HBM3", length);
  return 0;
}

int nvmlDeviceGetMemoryInfo(void* device, FakeMemory* memory) {
  memory->total = 80 * kGiB;
  memory->used = (unsigned long)device == 2 ? 20 * kGiB : kGiB / 2;
  memory->free = memory->total - memory->used;
  return 0;
}
