// ddp-train: distributed data-parallel training in C++, launched like a torchrun script (see --help).
#include "ddp_runtime/train.hpp"
#include "ddp_runtime/training/workloads.hpp"

int main(int argc, char** argv) { return ddp::runtime::train_main(argc, argv, ddp::runtime::make_workload); }
