#pragma once
// Data sets in the files Python users already write, memory-mapped: ranks on one node share the pages through
// the page cache, and a data set larger than memory trains (pages are read as batches need them).
//   FILE.pt   torch.save({"x": inputs, "y": targets}, FILE): one shard
//   DIR/      DIR/x.npy and DIR/y.npy (numpy.save, little-endian, C order): one shard
// Shards are read in the order given; their samples follow one another (torch.utils.data.ConcatDataset). x[i] is
// sample i's input, y[i] its target: class indices (any integer type) or values (floating point). Every shard's
// samples have the shape and type of the first's. Anything else (a missing key, a wrong shape or type, a
// truncated file) throws ddp::Error with one line naming the file, the key and what was expected.
#include <memory>
#include <string>

#include "ddp_runtime/job.hpp"

namespace ddp::runtime {

// `paths` is a comma-separated list, as --data takes it.
std::unique_ptr<Dataset> open_data_files(const std::string& paths);

}  // namespace ddp::runtime
