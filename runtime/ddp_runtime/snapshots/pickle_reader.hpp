#pragma once
// Reads files in torch.save's zip format: the part of Python's pickle that torch.load(weights_only=True)
// accepts for tensors and containers. Dicts and OrderedDicts become GenericDicts (keys str or int), lists
// GenericLists, tuples Tuples, plus ints, floats, bools, strings, None and CPU tensors.
//
// LibTorch's own unpickler (torch::jit::pickle_load) cannot read what Python saves: it turns every
// collections.OrderedDict into None (it expects one only as a tensor's backward hooks), and model.state_dict()
// is an OrderedDict. This reader has no such gap and refuses every other Python global.
//
// Tensors alias the bytes they are read from (the owner is kept alive): a memory-mapped data file is not
// copied, and ranks on one node share its pages. The memory of a mapped file is read-only.
#include <ATen/core/ivalue.h>

#include <stdexcept>

#include "ddp_runtime/common/mapped_file.hpp"

namespace ddp::runtime {

// A file that is not a readable torch.save archive; what() says why, without the file's name.
class UnreadableArchive : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws UnreadableArchive.
c10::IValue read_torch_save(const ByteView& bytes);

}  // namespace ddp::runtime
