#include "ddp_runtime/common/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace ddp::runtime {
namespace {

struct Mapping {
  void* address = MAP_FAILED;
  std::size_t size = 0;
  ~Mapping() {
    if (address != MAP_FAILED) munmap(address, size);
  }
};

}  // namespace

ByteView map_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    throw Error(path + " is not a regular file");
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<std::size_t>(info.st_size);
  if (mapping->size > 0) {
    mapping->address = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    if (mapping->address == MAP_FAILED) {
      close(fd);
      throw Error("cannot map " + path + " into memory: " + std::strerror(error));
    }
  }
  close(fd);
  const char* data = mapping->size > 0 ? static_cast<const char*>(mapping->address) : nullptr;
  return {data, mapping->size, std::move(mapping)};
}

ByteView bytes_in_memory(std::vector<char> bytes) {
  auto owner = std::make_shared<std::vector<char>>(std::move(bytes));
  return {owner->data(), owner->size(), owner};
}

}  // namespace ddp::runtime
